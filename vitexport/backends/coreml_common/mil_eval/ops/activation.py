"""Activations: gelu's modes, the relu family, sigmoid and its hard form, softplus, elu, prelu, and the like.

Per-channel parameters (prelu, softplus_parametric) apply along axis 1, the channel axis of MIL's
[n, C, *D] layout.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.elementwise import erf

SQRT2 = math.sqrt(2.0)


def _gelu(x, mode="EXACT", **_):
    # One temporary, updated in place: an MLP's activations are the largest tensors in a ViT.
    if mode == "EXACT":  # 0.5 x (1 + erf(x / sqrt 2))
        y = x * (1.0 / SQRT2)
        erf(y, out=y)
    elif mode == "TANH_APPROXIMATION":  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        y = x * x
        y *= 0.044715
        y += 1.0
        y *= x
        y *= math.sqrt(2.0 / math.pi)
        np.tanh(y, out=y)
    elif mode == "SIGMOID_APPROXIMATION":  # x sigmoid(1.702 x)
        return x * _sigmoid(1.702 * x)
    else:
        raise UnsupportedOpError("gelu", detail=f"mode {mode!r}")
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _sigmoid(x, **_):
    # exp of -|x| never overflows; the two halves of the logistic meet at 0
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.result_type(x, np.float32))


def _softplus(x, **_):
    return np.logaddexp(0.0, x).astype(np.result_type(x, np.float32))  # log(1 + e^x) without overflow


def _per_channel(values, rank: int) -> np.ndarray:
    """A [C] vector shaped to broadcast along axis 1 of a rank-`rank` tensor."""
    values = np.asarray(values, np.float32)
    return values.reshape((1, -1) + (1,) * (rank - 2)) if values.ndim == 1 and rank >= 2 else values


def _prelu(x, alpha, **_):
    return np.where(x > 0, x, x * _per_channel(alpha, x.ndim))


def _softplus_parametric(x, alpha, beta, **_):
    return _per_channel(alpha, x.ndim) * _softplus(x * _per_channel(beta, x.ndim))


def _elu(x, alpha=1.0, **_):
    return np.where(x > 0, x, float(alpha) * np.expm1(np.minimum(x, 0)))


OPS: dict[str, Callable[..., Any]] = {
    "gelu": _gelu,
    "relu": lambda x, **_: np.maximum(x, 0),
    "relu6": lambda x, **_: np.clip(x, 0, 6),
    "leaky_relu": lambda x, alpha=0.01, **_: np.where(x >= 0, x, x * float(alpha)),
    "prelu": _prelu,
    "elu": _elu,
    "clamped_relu": lambda x, alpha, beta, **_: np.minimum(np.where(x >= 0, x, x * float(alpha)), float(beta)),
    "thresholded_relu": lambda x, alpha=1.0, **_: np.where(x >= float(alpha), x, 0).astype(x.dtype),
    "threshold": lambda x, alpha, **_: np.maximum(x, alpha),
    "sigmoid": _sigmoid,
    "sigmoid_hard": lambda x, alpha=0.2, beta=0.5, **_: np.clip(x * float(alpha) + float(beta), 0, 1),
    "silu": lambda x, **_: x * _sigmoid(x),
    "softplus": _softplus,
    "softplus_parametric": _softplus_parametric,
    "softsign": lambda x, **_: x / (1 + np.abs(x)),
    "scaled_tanh": lambda x, alpha=1.0, beta=1.0, **_: float(alpha) * np.tanh(x * float(beta)),
    "linear_activation": lambda x, alpha=1.0, beta=0.0, **_: x * float(alpha) + float(beta),
}
