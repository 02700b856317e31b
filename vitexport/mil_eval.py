"""A NumPy executor for saved Core ML ML programs, so Core ML numerics can be checked off macOS.

coremltools reads a package's program and weight blobs on any OS, but only macOS can run it. This
module walks the program's main function op by op and computes each op with NumPy, following the
MIL op definitions. Where the program computes in fp16, every op's result is rounded to fp16, as an
fp16 engine stores it (the arithmetic itself runs in fp32: NumPy's fp16 matmul is very slow).
An op this executor does not know is an error that names it, never a skip.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np


class UnsupportedOpError(Exception):
    def __init__(self, op_type: str, name: str = ""):
        super().__init__(f"the Core ML evaluator does not implement op {op_type!r}" + (f" (at {name})" if name else ""))
        self.op_type = op_type


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x)


# --- op implementations: each takes the op's resolved inputs as keyword arguments ---------------

def _conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, **_):
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    sh, sw = (int(s) for s in (strides if strides is not None else (1, 1)))
    dh, dw = (int(d) for d in (dilations if dilations is not None else (1, 1)))
    groups = int(groups)
    if pad_type == "custom" and pad is not None:
        top, bottom, left, right = (int(p) for p in pad)
    elif pad_type == "same":
        out_h, out_w = math.ceil(h / sh), math.ceil(w / sw)
        ph = max((out_h - 1) * sh + (kh - 1) * dh + 1 - h, 0)
        pw = max((out_w - 1) * sw + (kw - 1) * dw + 1 - w, 0)
        top, left = ph // 2, pw // 2
        bottom, right = ph - top, pw - left
    else:
        top = bottom = left = right = 0
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    h, w = x.shape[2:]
    oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
    # im2col with strides: (n, c, oh, ow, kh, kw) view without copying
    s = x.strides
    cols = np.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw), writeable=False)
    out = []
    for g in range(groups):
        part = cols[:, g * cin_g:(g + 1) * cin_g]  # (n, cin_g, oh, ow, kh, kw)
        wg = weight[g * (cout // groups):(g + 1) * (cout // groups)]  # (cout_g, cin_g, kh, kw)
        out.append(np.einsum("ncijkl,ockl->noij", part, wg, optimize=True))
    y = np.concatenate(out, axis=1) if groups > 1 else out[0]
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y


def _linear(x, weight, bias=None, **_):
    y = np.matmul(x, weight.T)
    return y + bias if bias is not None else y


def _matmul(x, y, transpose_x=False, transpose_y=False, **_):
    if transpose_x:
        x = np.swapaxes(x, -1, -2)
    if transpose_y:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _reshape(x, shape, **_):
    target = [int(d) for d in np.asarray(shape).reshape(-1)]
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]  # 0 copies the input's dim
    return x.reshape(target)


def _slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    rank = x.ndim
    stride = np.ones(rank, int) if stride is None else np.asarray(stride).astype(int)
    begin_mask = np.zeros(rank, bool) if begin_mask is None else np.asarray(begin_mask, bool)
    end_mask = np.zeros(rank, bool) if end_mask is None else np.asarray(end_mask, bool)
    squeeze_mask = np.zeros(rank, bool) if squeeze_mask is None else np.asarray(squeeze_mask, bool)
    index = []
    for axis in range(rank):
        b = None if begin_mask[axis] else int(begin[axis])
        e = None if end_mask[axis] else int(end[axis])
        if squeeze_mask[axis]:
            index.append(int(begin[axis]))
        else:
            index.append(slice(b, e, int(stride[axis])))
    return x[tuple(index)]


def _gather(x, indices, axis=0, batch_dims=0, validate_indices=False, **_):
    axis, batch_dims = int(axis), int(batch_dims)
    indices = np.asarray(indices).astype(np.int64)
    if batch_dims:
        raise UnsupportedOpError("gather with batch_dims > 0")
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    return np.take(x, indices, axis=axis)


def _axes(axes, rank):
    return None if axes is None else tuple(int(a) % rank for a in np.asarray(axes).reshape(-1))


def _layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_):
    ax = _axes(axes, x.ndim) or (x.ndim - 1,)
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(epsilon))
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


def _softmax(x, axis=-1, **_):
    z = x - x.max(axis=int(axis), keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=int(axis), keepdims=True)


def _gelu(x, mode="EXACT", **_):
    if mode == "EXACT":
        return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    if mode == "SIGMOID_APPROXIMATION":
        return x / (1.0 + np.exp(-1.702 * x))
    raise UnsupportedOpError(f"gelu mode {mode}")


def _reduce(fn):
    def reduce(x, axes=None, keep_dims=False, **_):
        return fn(x, axis=_axes(axes, x.ndim), keepdims=bool(keep_dims))
    return reduce


def _squeeze(x, axes=None, **_):
    return np.squeeze(x, axis=_axes(axes, x.ndim))


def _expand_dims(x, axes, **_):
    out = x
    rank = x.ndim + len(np.asarray(axes).reshape(-1))
    for a in sorted(int(a) % rank for a in np.asarray(axes).reshape(-1)):
        out = np.expand_dims(out, a)
    return out


CAST_TYPES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32, "int64": np.int64,
              "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def _cast(x, dtype, **_):
    if dtype not in CAST_TYPES:
        raise UnsupportedOpError(f"cast to {dtype}")
    return np.asarray(x).astype(CAST_TYPES[dtype])


def _sdpa(query, key, value, attn_mask=None, **_):
    scores = np.matmul(query, np.swapaxes(key, -1, -2)) / np.sqrt(query.shape[-1])
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf) if attn_mask.dtype == np.bool_ else scores + attn_mask
    return np.matmul(_softmax(scores, axis=-1), value)


def _split(x, axis, num_splits=None, split_sizes=None, **_):
    """Several outputs: a tuple, one array per output var."""
    axis = int(axis)
    if split_sizes is not None:
        bounds = np.cumsum([int(s) for s in np.asarray(split_sizes)])[:-1]
        return tuple(np.split(x, bounds, axis=axis))
    return tuple(np.split(x, int(num_splits), axis=axis))


def _concat(values, axis, interleave=False, **_):
    if interleave:
        raise UnsupportedOpError("concat with interleave")
    # Shape arithmetic concatenates scalars (a gathered dimension) into shape vectors.
    return np.concatenate([np.atleast_1d(v) for v in values], axis=int(axis))


OPS: dict[str, Callable[..., Any]] = {
    "conv": _conv,
    "linear": _linear,
    "matmul": _matmul,
    "reshape": _reshape,
    "transpose": lambda x, perm, **_: np.transpose(x, [int(p) for p in perm]),
    "concat": _concat,
    "split": _split,
    "stack": lambda values, axis, **_: np.stack(values, axis=int(axis)),
    "add": lambda x, y, **_: x + y,
    "sub": lambda x, y, **_: x - y,
    "mul": lambda x, y, **_: x * y,
    "real_div": lambda x, y, **_: x / y,
    "pow": lambda x, y, **_: np.power(x, y),
    "maximum": lambda x, y, **_: np.maximum(x, y),
    "minimum": lambda x, y, **_: np.minimum(x, y),
    "layer_norm": _layer_norm,
    "softmax": _softmax,
    "gelu": _gelu,
    "relu": lambda x, **_: np.maximum(x, 0),
    "sigmoid": lambda x, **_: 1.0 / (1.0 + np.exp(-x)),
    "tanh": lambda x, **_: np.tanh(x),
    "exp": lambda x, **_: np.exp(x),
    "sqrt": lambda x, **_: np.sqrt(x),
    "rsqrt": lambda x, epsilon=1e-12, **_: 1.0 / np.sqrt(x + float(epsilon)),
    "erf": lambda x, **_: _erf(x),
    "slice_by_index": _slice_by_index,
    "gather": _gather,
    "squeeze": _squeeze,
    "expand_dims": _expand_dims,
    "reduce_mean": _reduce(np.mean),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "cast": _cast,
    "identity": lambda x, **_: x,
    "scaled_dot_product_attention": _sdpa,
    # integer shape arithmetic that programs with enumerated input shapes carry
    "shape": lambda x, **_: np.asarray(np.shape(x), dtype=np.int32),
    "floor_div": lambda x, y, **_: np.floor_divide(x, y),
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
    "tile": lambda x, reps, **_: np.tile(x, [int(r) for r in np.asarray(reps)]),
    "fill": lambda shape, value=0.0, **_: np.full([int(d) for d in np.asarray(shape)], value),
}


# --- weight decompression: Core ML materialises these once at load time, and so do we -----------

def _along(values, axis: int, rank: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast along `axis` (a scalar stays a scalar)."""
    values = np.asarray(values, np.float32)
    if values.size <= 1:
        return values.reshape(())
    shape = [1] * rank
    shape[axis] = -1
    return values.reshape(shape)


def _affine_dequantize(quantized_data, zero_point, scale, axis=0, **_):
    q = np.asarray(quantized_data, np.float32)
    axis = int(axis) % q.ndim
    return (q - _along(zero_point, axis, q.ndim)) * _along(scale, axis, q.ndim)


def _expand_blocks(values, shape) -> np.ndarray:
    """Repeat a per-block tensor (same rank, each dim dividing the target's) up to the full shape."""
    out = np.asarray(values, np.float32)
    for axis, (full, blocks) in enumerate(zip(shape, out.shape)):
        if blocks != full:
            out = np.repeat(out, full // blocks, axis=axis)
    return out


def _blockwise_shift_scale(data, scale, offset=None, **_):
    d = np.asarray(data, np.float32)
    if offset is not None:
        d = d - _expand_blocks(offset, d.shape)
    return d * _expand_blocks(scale, d.shape)


def _lut_to_dense(indices, lut, shape=None, **_):
    lut = np.asarray(lut, np.float32)
    if shape is not None:
        # iOS16 form: one table for the tensor, indices bit-packed little-endian into uint8.
        shape = [int(d) for d in np.asarray(shape)]
        count, nbits = int(np.prod(shape)), int(round(math.log2(lut.size)))
        bits = np.unpackbits(np.asarray(indices, np.uint8), bitorder="little")[:count * nbits].reshape(count, nbits)
        index = (bits.astype(np.int64) << np.arange(nbits)).sum(axis=1)
        return lut.reshape(-1)[index].reshape(shape)
    # iOS18 form: indices per element; lut is (*blocks, palette size, vector size).
    indices = np.asarray(indices).astype(np.int64)
    if lut.shape[-1] != 1:
        raise UnsupportedOpError("constexpr_lut_to_dense with vector palettization")
    table = lut[..., 0]  # (*blocks, palette)
    blocks = table.shape[:-1]
    # (coordinate // block size) per axis, broadcast over the output: memory stays output-sized.
    grid = [(np.arange(full) // (full // b)).reshape([-1 if a == i else 1 for a in range(indices.ndim)])
            for i, (full, b) in enumerate(zip(indices.shape, blocks))]
    return table[(*grid, indices)]


DECOMPRESSION_OPS: dict[str, Callable[..., Any]] = {
    "constexpr_affine_dequantize": _affine_dequantize,
    "constexpr_blockwise_shift_scale": _blockwise_shift_scale,
    "constexpr_lut_to_dense": _lut_to_dense,
    "constexpr_cast": lambda source_val, output_dtype, **_: _cast(source_val, output_dtype),
}


def _is_fp16(var) -> bool:
    from coremltools.converters.mil.mil import types

    dtype = getattr(var, "dtype", None)
    return dtype is types.fp16


class MilProgram:
    """The main function of an ML program, ready to run with NumPy."""

    def __init__(self, function):
        self.function = function
        self.input_names = list(function.inputs)
        self.output_names = [v.name for v in function.outputs]
        self.input_shapes = {name: tuple(v.shape) for name, v in function.inputs.items()}
        self.constants: dict[str, np.ndarray] = {}
        self.steps = []
        for op in function.operations:
            if op.op_type == "const":
                self.constants[op.outputs[0].name] = _as_array(op.outputs[0].val, op.outputs[0])
            elif op.op_type in DECOMPRESSION_OPS:
                args = {k: _resolve(v, self.constants) for k, v in op.inputs.items()}
                self.constants[op.outputs[0].name] = _round(DECOMPRESSION_OPS[op.op_type](**args), op.outputs[0])
            elif op.op_type in OPS:
                self.steps.append(op)
            else:
                raise UnsupportedOpError(op.op_type, op.name)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, Any] = dict(self.constants)
        for name in self.input_names:
            if name not in inputs:
                raise ValueError(f"missing input {name!r}")
            env[name] = np.asarray(inputs[name], dtype=np.float32)
        for op in self.steps:
            args = {k: _resolve(v, env) for k, v in op.inputs.items()}
            result = OPS[op.op_type](**args)
            results = result if isinstance(result, tuple) else (result,)
            for var, value in zip(op.outputs, results):
                env[var.name] = _round(value, var)
        return {name: np.asarray(env[name], dtype=np.float32) for name in self.output_names}


def _resolve(var, env):
    if isinstance(var, (list, tuple)):
        return [_resolve(v, env) for v in var]
    if var.name in env:
        return env[var.name]
    value = var.val
    if value is None:
        raise ValueError(f"no value for {var.name}")
    return value if isinstance(value, str) else np.asarray(value)


def _as_array(value, var):
    if isinstance(value, str) or value is None:
        return value
    array = np.asarray(value)
    if array.dtype == np.float16:
        return array.astype(np.float32)  # keep fp16 values, compute in fp32
    return array


def _round(value, var):
    """Round to fp16 when the op's output is fp16; compute stays in fp32."""
    array = np.asarray(value)
    if _is_fp16(var):
        return array.astype(np.float16).astype(np.float32)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    return array


def load_program(path: str | Path) -> MilProgram:
    """Read a saved .mlpackage (program + weight blobs) into an executable MilProgram."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import coremltools as ct
        from coremltools.converters.mil.frontend.milproto.load import load as load_milproto

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path} is not an .mlpackage directory")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    if spec.WhichOneof("Type") != "mlProgram":
        raise ValueError(f"{path} holds a {spec.WhichOneof('Type')} model, not an ML program")
    weights = Path(model.weights_dir) if getattr(model, "weights_dir", None) else \
        path / "Data" / "com.apple.CoreML" / "weights"
    program = load_milproto(spec, spec.specificationVersion, str(weights))
    return MilProgram(program.functions["main"])
