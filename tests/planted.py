"""Models with the faults the verifier must catch (used as `tests/planted.py:NAME` specs)."""

import torch.nn.functional as F
from torch import nn


class BatchOneReshape(nn.Module):
    """Hard-codes batch 1 in a reshape: fine at batch 1, wrong for any other batch."""

    input_shape = (1, 3, 32, 32)

    def __init__(self):
        super().__init__()
        self.patchify = nn.Conv2d(3, 32, 8, stride=8)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        t = self.patchify(x).reshape(1, 32, 16).transpose(1, 2)  # (1, c, h, w) -> (1, hw, c): the bug
        return self.head(t.mean(1))


class ActiveDropout(nn.Module):
    """Calls dropout with training=True, so eval() cannot switch it off."""

    input_shape = (1, 3, 32, 32)

    def __init__(self):
        super().__init__()
        self.patchify = nn.Conv2d(3, 32, 8, stride=8)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        t = self.patchify(x).flatten(2).transpose(1, 2)
        return self.head(F.dropout(t, p=0.2, training=True).mean(1))


def batch_one_reshape():
    return BatchOneReshape()


def active_dropout():
    return ActiveDropout()


class ZeroHead(nn.Module):
    """A zero-initialised classifier (timm's Hiera, torchvision's ViT at random weights): every input
    gives the same logits, while the blocks below compute as usual."""

    input_shape = (1, 3, 32, 32)

    def __init__(self):
        super().__init__()
        self.patchify = nn.Conv2d(3, 32, 8, stride=8)
        self.blocks = nn.Sequential(*(nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 32), nn.GELU())
                                      for _ in range(2)))
        self.head = nn.Linear(32, 10)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        t = self.patchify(x).flatten(2).transpose(1, 2)  # (n, c, h, w) -> (n, hw, c)
        return self.head(self.blocks(t).mean(1))


def zero_head():
    return ZeroHead()
