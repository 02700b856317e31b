"""The head of a model whose output is constant: timm's Hiera and torchvision's ViT start with a
zero-initialised classifier, so at random weights every input gives the same output while the
network below the head computes as usual. The last Linear module the forward calls is the head when
its own output is constant and its input is not; its input is then the last tensor that carries
information (what verification compares instead, verify/prehead.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Head:
    """The module that makes the output constant, and PyTorch's input to it (the pre-head features)."""

    path: str  # module path: "head.fc", "heads.head"
    features: "np.ndarray"  # PyTorch's input to it, for the input the check used


def is_constant(a: "np.ndarray") -> bool:
    import numpy as np

    return a.size > 1 and bool(np.ptp(np.asarray(a, dtype=np.float64)) == 0)


def constant_head(model, x: "np.ndarray") -> Head | str:
    """The head that makes the model's output constant for `x` (a float32 array), with its input, or
    why there is none whose input carries information. Run it in the caller's export mode
    (models.tracing.export_mode), as the model is run for export."""
    import torch
    from torch import nn

    calls: list[tuple[str, object, object]] = []  # (path, input, output) of every Linear, in call order
    hooks = [module.register_forward_hook(
        lambda _m, inputs, output, path=path: calls.append((path, inputs[0], output)))
        for path, module in model.named_modules() if isinstance(module, nn.Linear)]
    try:
        with torch.inference_mode():
            model(torch.from_numpy(x))
    finally:
        for h in hooks:
            h.remove()
    if not calls:
        return "the model has no Linear head whose input could be compared"
    path, features, output = calls[-1]
    output = output.detach().float().cpu().numpy()
    features = features.detach().float().cpu().numpy()
    if not is_constant(output):
        return f"its last Linear ({path}) is not what makes the output constant"
    if is_constant(features):
        return f"the input of its head ({path}) is constant too"
    return Head(path, features)
