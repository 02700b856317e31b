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


def _log_sum_exp(x, axis=None, keepdims=False):
    top = np.max(x, axis=axis, keepdims=True)  # shifted by the maximum, so exp cannot overflow
    total = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True)) + top
    return total if keepdims else np.squeeze(total, axis=axis)


NUMPY_TYPES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32, "int64": np.int64,
               "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def cast(x, dtype, **_):
    if dtype not in NUMPY_TYPES:
        raise UnsupportedOpError("cast", detail=f"to {dtype}")
    return np.asarray(x).astype(NUMPY_TYPES[dtype])


def _along_axis(values, axis, rank: int) -> np.ndarray:
    """A quantisation scale or zero point: a scalar, or a vector along `axis`."""
    values = np.asarray(values, np.float32)
    if values.ndim == 0 or values.size == 1 and axis is None:
        return values.reshape(())
    shape = [1] * rank
    shape[int(axis) % rank] = -1
    return values.reshape(shape)


def _quantize(input, scale, output_dtype, zero_point=None, axis=None, **_):  # noqa: A002  (MIL's name)
    """clip(round(x / scale) + zero_point) into int8 or uint8, rounding half to even."""
    dtype = NUMPY_TYPES[str(output_dtype)]
    q = np.round(input / _along_axis(scale, axis, input.ndim))
    if zero_point is not None:
        q = q + _along_axis(zero_point, axis, input.ndim)
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(input, scale, zero_point=None, axis=None, **_):  # noqa: A002
    x = np.asarray(input, np.float32)
    if zero_point is not None:
        x = x - _along_axis(zero_point, axis, x.ndim)
    return x * _along_axis(scale, axis, x.ndim)


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
    "tan": lambda x, **_: np.tan(x),
    "acos": lambda x, **_: np.arccos(x),
    "asin": lambda x, **_: np.arcsin(x),
    "atan": lambda x, **_: np.arctan(x),
    "atanh": lambda x, **_: np.arctanh(x),
    "cosh": lambda x, **_: np.cosh(x),
    "sinh": lambda x, **_: np.sinh(x),
    "exp2": lambda x, **_: np.exp2(x),
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
    "logical_xor": lambda x, y, **_: np.logical_xor(x, y),
    "select": lambda cond, a, b, **_: np.where(cond, a, b),
    # reductions
    "reduce_mean": _reduce(np.mean),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_sum_square": _reduce(lambda x, **kw: np.sum(np.square(x), **kw)),
    "reduce_l1_norm": _reduce(lambda x, **kw: np.sum(np.abs(x), **kw)),
    "reduce_l2_norm": _reduce(lambda x, **kw: np.sqrt(np.sum(np.square(x), **kw))),
    "reduce_log_sum": _reduce(lambda x, **kw: np.log(np.sum(x, **kw))),
    "reduce_log_sum_exp": _reduce(_log_sum_exp),
    "reduce_argmax": _reduce_arg(np.argmax),
    "reduce_argmin": _reduce_arg(np.argmin),
    # types and quantisation
    "cast": cast,
    "quantize": _quantize,
    "dequantize": _dequantize,
}
