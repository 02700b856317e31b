"""Elementwise ops: unary and binary math, comparisons and logic, reductions, and casts."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.args import as_axes


def erf(x, out=None):
    try:  # SciPy when installed; coremltools does not bring it, torch (which vitexport needs) does erf too
        from scipy.special import erf as scipy_erf
    except ImportError:
        return _torch_erf(x, out)
    return scipy_erf(x, out=out)


def _torch_erf(x, out=None):
    import torch

    y = torch.special.erf(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    if out is None:
        return y
    out[...] = y
    return out


def _reduce(fn):
    def reduce(x, axes=None, keep_dims=False, **_):
        return fn(x, axis=as_axes(axes, x.ndim), keepdims=bool(keep_dims))
    return reduce


def _reduce_arg(fn):
    def reduce(x, axis=-1, keep_dims=False, **_):
        return fn(x, axis=int(axis), keepdims=bool(keep_dims)).astype(np.int32)
    return reduce


NUMPY_TYPES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32, "int64": np.int64,
               "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def cast(x, dtype, **_):
    if dtype not in NUMPY_TYPES:
        raise UnsupportedOpError("cast", detail=f"to {dtype}")
    return np.asarray(x).astype(NUMPY_TYPES[dtype])


OPS: dict[str, Callable[..., Any]] = {
    # unary math
    "tanh": lambda x, **_: np.tanh(x),
    "clip": lambda x, alpha, beta, **_: np.clip(x, alpha, beta),
    "exp": lambda x, **_: np.exp(x),
    "log": lambda x, epsilon=1e-45, **_: np.log(x + float(epsilon)),
    "sqrt": lambda x, **_: np.sqrt(x),
    "rsqrt": lambda x, epsilon=1e-12, **_: 1.0 / np.sqrt(x + float(epsilon)),
    "inverse": lambda x, epsilon=1e-4, **_: 1.0 / (x + float(epsilon)),
    "square": lambda x, **_: x * x,
    "abs": lambda x, **_: np.abs(x),
    "sign": lambda x, **_: np.sign(x),
    "floor": lambda x, **_: np.floor(x),
    "ceil": lambda x, **_: np.ceil(x),
    "round": lambda x, **_: np.round(x),
    "erf": lambda x, **_: erf(x),
    "cos": lambda x, **_: np.cos(x),
    "sin": lambda x, **_: np.sin(x),
    # binary math
    "add": lambda x, y, **_: x + y,
    "sub": lambda x, y, **_: x - y,
    "mul": lambda x, y, **_: x * y,
    "real_div": lambda x, y, **_: x / y,
    "floor_div": lambda x, y, **_: np.floor_divide(x, y),
    "mod": lambda x, y, **_: np.mod(x, y),
    "pow": lambda x, y, **_: np.power(x, y),
    "maximum": lambda x, y, **_: np.maximum(x, y),
    "minimum": lambda x, y, **_: np.minimum(x, y),
    # comparisons and logic (masks, shape arithmetic)
    "equal": lambda x, y, **_: np.equal(x, y),
    "not_equal": lambda x, y, **_: np.not_equal(x, y),
    "less": lambda x, y, **_: np.less(x, y),
    "greater": lambda x, y, **_: np.greater(x, y),
    "less_equal": lambda x, y, **_: np.less_equal(x, y),
    "greater_equal": lambda x, y, **_: np.greater_equal(x, y),
    "logical_and": lambda x, y, **_: np.logical_and(x, y),
    "logical_or": lambda x, y, **_: np.logical_or(x, y),
    "logical_not": lambda x, **_: np.logical_not(x),
    "select": lambda cond, a, b, **_: np.where(cond, a, b),
    # reductions
    "reduce_mean": _reduce(np.mean),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_argmax": _reduce_arg(np.argmax),
    "reduce_argmin": _reduce_arg(np.argmin),
    # types
    "cast": cast,
}
