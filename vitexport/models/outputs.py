"""A model's output, whatever its kind, as named tensors in one documented order.

Users' modules return a tensor, a tuple or list, a namedtuple, a dict, a dataclass (transformers'
`ModelOutput` is both a dict and a dataclass) or any nesting of these. Exporters and runtimes take
a flat list of named tensors, so vitexport flattens the output once, depth first:

- a tensor is one output;
- a mapping in its key order, a dataclass in its field order, a namedtuple by its fields, each
  named by its key or field;
- a tuple or list by position, named `output_0`, `output_1`, ... at the top level and
  `PARENT_0`, `PARENT_1`, ... below it;
- None and other values that are not tensors are left out (an exporter cannot return them).

Nested names join their parts with `_` (`hidden_states_0`). A model can name its outputs itself with
an `output_names` list, one name per tensor in this order.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from vitexport.core.errors import SourceError

Path = tuple[Any, ...]  # keys (str), field names (str) and positions (int) from the output's root


def tensor_paths(value: Any, path: Path = ()) -> list[Path]:
    """Where each tensor sits in `value`, in the documented order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [path]
    if isinstance(value, Mapping):  # dicts, OrderedDicts, transformers' ModelOutput (which skips None fields)
        children = [(key, value[key]) for key in value]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        children = list(zip(value._fields, value))
    elif isinstance(value, (tuple, list)):
        children = list(enumerate(value))
    else:
        return []
    return [p for key, child in children for p in tensor_paths(child, (*path, key))]


def pick(value: Any, path: Path) -> Any:
    """The tensor at `path` in an output of the same structure."""
    for key in path:
        if isinstance(value, Mapping):
            value = value[key]
        elif isinstance(key, str):
            value = getattr(value, key)
        else:
            value = value[key]
    return value


def name_of(path: Path) -> str:
    if not path:  # the output is one tensor
        return "output"
    parts = [str(p) for p in path]
    if path and isinstance(path[0], int):
        parts[0] = f"output_{path[0]}"
    name = re.sub(r"[^A-Za-z0-9_]+", "_", "_".join(parts)).strip("_")
    return name if name and not name[0].isdigit() else f"output_{name}"


def flat_names(paths: list[Path], given: list[str] | None, where: str) -> list[str]:
    """The outputs' names: the model's own `output_names` when it gives them, else from their paths."""
    if given is not None:
        if len(given) != len(paths):
            raise SourceError(f"{where}: output_names names {len(given)} outputs, but the model returns "
                              f"{len(paths)} tensors")
        return list(given)
    names = [name_of(p) for p in paths]
    if len(set(names)) != len(names):
        raise SourceError(f"{where}: its outputs' names collide ({', '.join(names)}); give the module an "
                          "`output_names` list, one name per tensor")
    return names


def flattened(model, paths: list[Path]):
    """`model` as a module whose forward returns the tensors at `paths` (one tensor alone)."""
    import torch

    class FlatOutputs(torch.nn.Module):
        """forward(x) -> the wrapped model's output tensors in vitexport's documented order."""

        def __init__(self, inner, where: list[Path]):
            super().__init__()
            self.model, self.paths = inner, where
            for attr in ("input_shape", "preprocessing"):
                if hasattr(inner, attr):
                    setattr(self, attr, getattr(inner, attr))

        def forward(self, x):
            out = self.model(x)
            picked = tuple(pick(out, p) for p in self.paths)
            return picked[0] if len(picked) == 1 else picked

    return FlatOutputs(model, paths)
