"""Dense compute ops: linear, matmul, einsum, softmax and attention."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


# --- linear algebra and attention -------------------------------------------------------------------

def _linear(x, weight, bias=None, **_):
    # One 2-D GEMM over all leading dims: faster than a stacked matmul.
    y = (x.reshape(-1, x.shape[-1]) @ weight.T).reshape(*x.shape[:-1], weight.shape[0])
    if bias is not None:
        y += bias  # in place: large temporaries cost page faults, not just arithmetic
    return y


def _matmul(x, y, transpose_x=False, transpose_y=False, **_):
    if transpose_x:
        x = np.swapaxes(x, -1, -2)
    if transpose_y:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _einsum(values, equation, **_):
    return np.einsum(str(equation), *values, optimize=True)


def _softmax(x, axis=-1, **_):
    z = x - x.max(axis=int(axis), keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=int(axis), keepdims=True)
    return z


def _sdpa(query, key, value, attn_mask=None, **_):
    scores = np.matmul(query, np.swapaxes(key, -1, -2))  # (..., L, S)
    scores *= 1.0 / math.sqrt(query.shape[-1])
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf) if attn_mask.dtype == np.bool_ else scores + attn_mask
    return np.matmul(_softmax(scores, axis=-1), value)


OPS: dict[str, Callable[..., Any]] = {
    "linear": _linear,
    "matmul": _matmul,
    "einsum": _einsum,
    "scaled_dot_product_attention": _sdpa,
    "softmax": _softmax,
}
