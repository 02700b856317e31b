"""User models whose outputs come in every kind users write: dicts, namedtuples, dataclasses,
transformers' ModelOutput, tuples and nestings of them, and one whose output ignores its input."""

import collections
import dataclasses
from typing import Optional

import torch


class TwoHeads(torch.nn.Module):
    input_shape = (1, 3, 16, 16)

    def __init__(self):
        super().__init__()
        self.logits = torch.nn.Linear(3 * 16 * 16, 10)
        self.embed = torch.nn.Linear(3 * 16 * 16, 4)

    def heads(self, x):
        flat = x.flatten(1)  # (n, c, h, w) -> (n, chw)
        return self.logits(flat), self.embed(flat)


class ReturnsDict(TwoHeads):
    def forward(self, x):
        logits, embedding = self.heads(x)
        return {"logits": logits, "embedding": embedding}


Pair = collections.namedtuple("Pair", "logits embedding")


class ReturnsNamedTuple(TwoHeads):
    def forward(self, x):
        return Pair(*self.heads(x))


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    embedding: torch.Tensor
    attentions: Optional[torch.Tensor] = None  # left out: None is not an output


class ReturnsDataclass(TwoHeads):
    def forward(self, x):
        return Output(*self.heads(x))


class ReturnsTuple(TwoHeads):
    def forward(self, x):
        return self.heads(x)


class ReturnsNesting(TwoHeads):
    def forward(self, x):
        logits, embedding = self.heads(x)
        return {"logits": logits, "hidden": [embedding, 2 * embedding], "nothing": None, "count": 3}


class ReturnsModelOutput(TwoHeads):
    def forward(self, x):
        from transformers.modeling_outputs import ImageClassifierOutput

        logits, embedding = self.heads(x)
        return ImageClassifierOutput(logits=logits, hidden_states=(embedding,))


class IgnoresItsInput(TwoHeads):
    def forward(self, x):
        return self.logits.weight[:, :1].T.expand(1, 10) + 0.0 * self.logits.bias


# factory -> the output names vitexport must give its artifact
EXPECTED = {
    "dict": ["logits", "embedding"],
    "namedtuple": ["logits", "embedding"],
    "dataclass": ["logits", "embedding"],
    "tuple": ["output_0", "output_1"],
    "nesting": ["logits", "hidden_0", "hidden_1"],
    "model_output": ["logits", "hidden_states_0"],
}
CLASSES = {"dict": ReturnsDict, "namedtuple": ReturnsNamedTuple, "dataclass": ReturnsDataclass, "tuple": ReturnsTuple,
           "nesting": ReturnsNesting, "model_output": ReturnsModelOutput, "ignores_input": IgnoresItsInput}


def make(kind: str):
    torch.manual_seed(0)
    return CLASSES[kind]()


def dict_model():
    return make("dict")


def namedtuple_model():
    return make("namedtuple")


def dataclass_model():
    return make("dataclass")


def tuple_model():
    return make("tuple")


def nesting_model():
    return make("nesting")


def model_output_model():
    return make("model_output")


def ignores_input_model():
    return make("ignores_input")
