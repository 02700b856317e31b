"""A NumPy executor for saved Core ML ML programs, so Core ML numerics can be checked off macOS.

coremltools reads a package's program and weight blobs on any OS, but only macOS can run it. This
module walks the program's entry function op by op and computes each op with NumPy, following the
MIL op definitions. Where the program computes in fp16, every op's result is rounded to fp16, as an
fp16 engine stores it (the arithmetic itself runs in fp32: NumPy's fp16 matmul is very slow).
Compressed weights (constexpr_* ops) are decompressed once, at load time.
An op this executor does not know is an error that names it, never a skip.

    program = load_program("model.mlpackage")
    outputs = program.run({program.input_names[0]: pixels})
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np


class UnsupportedOpError(Exception):
    """An op (or an op's mode) that the evaluator does not implement; the message names it."""

    def __init__(self, op_type: str, name: str = "", detail: str = ""):
        where = f" (at {name})" if name else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"the Core ML evaluator does not implement op {op_type!r}{extra}{where}")
        self.op_type = op_type


SQRT2 = math.sqrt(2.0)  # Python floats keep float32 arrays float32 (a NumPy float64 scalar would promote)


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _axes(axes, rank: int) -> tuple[int, ...] | None:
    return None if axes is None else tuple(a % rank for a in _ints(axes))


# --- dense compute ops ------------------------------------------------------------------------------

def _conv_padding(pad_type, pad, spatial, kernel, strides, dilations) -> list[tuple[int, int]]:
    """(before, after) padding per spatial axis."""
    if pad_type == "custom":
        p = _ints(pad) if pad is not None else [0] * (2 * len(spatial))
        return [(p[2 * i], p[2 * i + 1]) for i in range(len(spatial))]
    if pad_type in ("same", "same_lower"):
        out = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            out.append((small, total - small) if pad_type == "same" else (total - small, small))
        return out
    if pad_type == "valid":
        return [(0, 0)] * len(spatial)
    raise UnsupportedOpError("conv", detail=f"pad_type {pad_type!r}")


def _conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, **_):
    if x.ndim == 3:  # conv1d: run as a 2-D conv over a height of 1
        y = _conv(x[:, :, None], weight[:, :, None], bias, _height_one(strides), pad_type,
                  None if pad is None else [0, 0, *_ints(pad)], _height_one(dilations), groups)
        return y[:, :, 0]
    if x.ndim != 4:
        raise UnsupportedOpError("conv", detail=f"rank-{x.ndim} input")
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    sh, sw = _ints(strides) if strides is not None else (1, 1)
    dh, dw = _ints(dilations) if dilations is not None else (1, 1)
    g = int(groups)
    (top, bottom), (left, right) = _conv_padding(pad_type, pad, (h, w), (kh, kw), (sh, sw), (dh, dw))
    if g == 1 and (sh, sw) == (kh, kw) and (dh, dw) == (1, 1) and not (top or bottom or left or right) \
            and h % kh == 0 and w % kw == 0:
        y = _patchify(x, weight)
    else:
        x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))) if top or bottom or left or right else x
        h, w = x.shape[2:]
        oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
        s = x.strides
        # im2col as a view: (n, groups, cin_g, oh, ow, kh, kw), no copy until the contraction
        cols = np.lib.stride_tricks.as_strided(
            x, (n, g, cin_g, oh, ow, kh, kw),
            (s[0], s[1] * cin_g, s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw), writeable=False)
        wg = weight.reshape(g, cout // g, cin_g, kh, kw)
        y = np.einsum("ngcijkl,gockl->ngoij", cols, wg, optimize=True).reshape(n, cout, oh, ow)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y


def _height_one(values) -> list[int]:
    """A conv1d stride/dilation as the 2-D one over (1, width)."""
    return [1, *(_ints(values) if values is not None else [1])]


def _patchify(x, weight):
    """Stride == kernel, no padding (a ViT's patch embedding): one GEMM over non-overlapping patches."""
    n, c, h, w = x.shape
    cout, _, kh, kw = weight.shape
    oh, ow = h // kh, w // kw
    patches = x.reshape(n, c, oh, kh, ow, kw).transpose(0, 2, 4, 1, 3, 5)  # (n, oh, ow, c, kh, kw)
    y = patches.reshape(n * oh * ow, c * kh * kw) @ weight.reshape(cout, -1).T  # (n*oh*ow, cout)
    return y.reshape(n, oh, ow, cout).transpose(0, 3, 1, 2)  # (n, cout, oh, ow)


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


# --- normalisation and activations ------------------------------------------------------------------

def _layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_):
    ax = _axes(axes, x.ndim) or (x.ndim - 1,)
    y = x - x.mean(axis=ax, keepdims=True)
    variance = np.square(y).mean(axis=ax, keepdims=True)
    y /= np.sqrt(variance + float(epsilon))
    if gamma is not None:
        y *= gamma
    if beta is not None:
        y += beta
    return y


def _batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_):
    shape = (1, -1) + (1,) * (x.ndim - 2)  # per channel (axis 1)
    y = (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + float(epsilon))
    if gamma is not None:
        y = y * gamma.reshape(shape)
    return y + beta.reshape(shape) if beta is not None else y


def _erf(x, out=None):
    try:  # SciPy when installed; coremltools does not bring it, torch (which vitexport needs) does erf too
        from scipy.special import erf
    except ImportError:
        return _torch_erf(x, out)
    return erf(x, out=out)


def _torch_erf(x, out=None):
    import torch

    y = torch.special.erf(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    if out is None:
        return y
    out[...] = y
    return out


def _gelu(x, mode="EXACT", **_):
    # One temporary, updated in place: an MLP's activations are the largest tensors in a ViT.
    if mode == "EXACT":  # 0.5 x (1 + erf(x / sqrt 2))
        y = x * (1.0 / SQRT2)
        _erf(y, out=y)
    elif mode == "TANH_APPROXIMATION":  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        y = x * x
        y *= 0.044715
        y += 1.0
        y *= x
        y *= math.sqrt(2.0 / math.pi)
        np.tanh(y, out=y)
    elif mode == "SIGMOID_APPROXIMATION":  # x sigmoid(1.702 x) = 0.5 x (1 + tanh(0.851 x))
        return x * _sigmoid(1.702 * x)
    else:
        raise UnsupportedOpError("gelu", detail=f"mode {mode!r}")
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _sigmoid(x, **_):
    return 1.0 / (1.0 + np.exp(-x))


# --- shape and indexing ops -------------------------------------------------------------------------

def _reshape(x, shape, **_):
    target = _ints(shape)
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]  # 0 copies the input's dim
    return x.reshape(target)


def _slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    rank = x.ndim
    begin, end = _ints(begin), _ints(end)
    stride = _ints(stride) if stride is not None else [1] * rank
    masks = [np.zeros(rank, bool) if m is None else np.asarray(m, bool).reshape(-1)
             for m in (begin_mask, end_mask, squeeze_mask)]
    index = []
    for axis in range(rank):
        if masks[2][axis]:  # squeezed: pick the single index `begin`
            index.append(begin[axis])
        else:
            index.append(slice(None if masks[0][axis] else begin[axis], None if masks[1][axis] else end[axis],
                               stride[axis]))
    return x[tuple(index)]


def _slice_by_size(x, begin, size, **_):
    index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(_ints(begin), _ints(size)))
    return x[index]


def _gather(x, indices, axis=0, batch_dims=0, validate_indices=False, **_):
    axis, batch_dims = int(axis) % x.ndim, int(batch_dims)
    indices = np.asarray(indices).astype(np.int64)
    indices = np.where(indices < 0, indices + x.shape[axis], indices)  # negative indices count from the end
    if batch_dims == 0:
        return np.take(x, indices, axis=axis)
    # Leading batch dims pair x[b] with indices[b]: flatten them and gather per batch entry.
    batch = x.shape[:batch_dims]
    xs = x.reshape(-1, *x.shape[batch_dims:])  # (B, ...)
    ids = indices.reshape(-1, *indices.shape[batch_dims:])  # (B, ...)
    out = [np.take(xs[b], ids[b], axis=axis - batch_dims) for b in range(xs.shape[0])]
    return np.stack(out).reshape(*batch, *out[0].shape)


def _gather_along_axis(x, indices, axis=0, **_):
    axis = int(axis) % x.ndim
    indices = np.asarray(indices).astype(np.int64)
    return np.take_along_axis(x, np.where(indices < 0, indices + x.shape[axis], indices), axis=axis)


def _squeeze(x, axes=None, **_):
    return np.squeeze(x, axis=_axes(axes, x.ndim))


def _expand_dims(x, axes, **_):
    rank = x.ndim + len(_ints(axes))
    for a in sorted(a % rank for a in _ints(axes)):  # ascending, so earlier inserts do not shift later ones
        x = np.expand_dims(x, a)
    return x


def _concat(values, axis, interleave=False, **_):
    # Shape arithmetic concatenates scalars (a gathered dimension) into shape vectors.
    values = [np.atleast_1d(v) for v in values]
    axis = int(axis) % values[0].ndim
    if not interleave:
        return np.concatenate(values, axis=axis)
    # Interleave equal slices: stack behind `axis`, then merge the two axes.
    stacked = np.stack(values, axis=axis + 1)  # (..., d, k, ...)
    shape = list(values[0].shape)
    shape[axis] *= len(values)
    return stacked.reshape(shape)


def _split(x, axis, num_splits=None, split_sizes=None, **_):
    """Several outputs: a tuple, one array per output var."""
    axis = int(axis)
    if split_sizes is not None:
        return tuple(np.split(x, np.cumsum(_ints(split_sizes))[:-1], axis=axis))
    return tuple(np.split(x, int(num_splits), axis=axis))


def _pad(x, pad, mode="constant", constant_val=0.0, **_):
    p = _ints(pad)
    n = len(p) // 2  # pads the last n dims
    widths = [(0, 0)] * (x.ndim - n) + [(p[2 * i], p[2 * i + 1]) for i in range(n)]
    if mode == "constant":
        return np.pad(x, widths, constant_values=float(constant_val))
    if mode in ("reflect", "replicate"):
        return np.pad(x, widths, mode="reflect" if mode == "reflect" else "edge")
    raise UnsupportedOpError("pad", detail=f"mode {mode!r}")


def _reduce(fn):
    def reduce(x, axes=None, keep_dims=False, **_):
        return fn(x, axis=_axes(axes, x.ndim), keepdims=bool(keep_dims))
    return reduce


def _reduce_arg(fn):
    def reduce(x, axis=-1, keep_dims=False, **_):
        return fn(x, axis=int(axis), keepdims=bool(keep_dims)).astype(np.int32)
    return reduce


NUMPY_TYPES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32, "int64": np.int64,
               "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def _cast(x, dtype, **_):
    if dtype not in NUMPY_TYPES:
        raise UnsupportedOpError("cast", detail=f"to {dtype}")
    return np.asarray(x).astype(NUMPY_TYPES[dtype])


OPS: dict[str, Callable[..., Any]] = {
    # compute
    "conv": _conv,
    "linear": _linear,
    "matmul": _matmul,
    "einsum": _einsum,
    "scaled_dot_product_attention": _sdpa,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    # activations and elementwise math
    "gelu": _gelu,
    "relu": lambda x, **_: np.maximum(x, 0),
    "silu": lambda x, **_: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": lambda x, **_: np.tanh(x),
    "leaky_relu": lambda x, alpha=0.01, **_: np.where(x >= 0, x, x * float(alpha)),
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
    "erf": lambda x, **_: _erf(x),
    "cos": lambda x, **_: np.cos(x),
    "sin": lambda x, **_: np.sin(x),
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
    # shapes, layout and indexing
    "reshape": _reshape,
    "transpose": lambda x, perm, **_: np.transpose(x, _ints(perm)),
    "squeeze": _squeeze,
    "expand_dims": _expand_dims,
    "concat": _concat,
    "split": _split,
    "stack": lambda values, axis, **_: np.stack(values, axis=int(axis)),
    "tile": lambda x, reps, **_: np.tile(x, _ints(reps)),
    "pad": _pad,
    "slice_by_index": _slice_by_index,
    "slice_by_size": _slice_by_size,
    "gather": _gather,
    "gather_along_axis": _gather_along_axis,
    "shape": lambda x, **_: np.asarray(np.shape(x), dtype=np.int32),
    "fill": lambda shape, value=0.0, **_: np.full(_ints(shape), value),
    "range_1d": lambda start, end, step, **_: np.arange(start, end, step),
    "cast": _cast,
    "identity": lambda x, **_: x,
}


# Ops that only move, pick or compare existing values: on fp16 values their results are fp16 values
# already, so an fp16 program skips the rounding (and a transpose stays a free view).
EXACT_OPS = frozenset({
    "reshape", "transpose", "squeeze", "expand_dims", "concat", "split", "stack", "tile", "pad", "slice_by_index",
    "slice_by_size", "gather", "gather_along_axis", "identity", "relu", "maximum", "minimum", "clip", "select",
    "reduce_max", "reduce_min", "abs", "sign", "floor", "ceil", "round",
})


# --- weight decompression: Core ML materialises these once at load time, and so do we ---------------

def _along(values, axis: int, rank: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast along `axis` (a scalar stays a scalar)."""
    values = np.asarray(values, np.float32)
    if values.size <= 1:
        return values.reshape(())
    shape = [1] * rank
    shape[axis] = -1
    return values.reshape(shape)


def _affine_dequantize(quantized_data, zero_point, scale, axis=0, **_):
    """iOS16: (q - zero_point) * scale, per tensor or per channel along `axis`."""
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
    """iOS18: (data - offset) * scale, with scale/offset given per block of the data."""
    d = np.asarray(data, np.float32)
    if offset is not None:
        d = d - _expand_blocks(offset, d.shape)
    return d * _expand_blocks(scale, d.shape)


def _unpack_bits(packed, nbits: int, count: int) -> np.ndarray:
    """iOS16 packing: `count` unsigned `nbits`-bit values, least significant bit first, in uint8 bytes."""
    bits = np.unpackbits(np.asarray(packed, np.uint8), bitorder="little")[:count * nbits].reshape(count, nbits)
    return (bits.astype(np.int64) << np.arange(nbits)).sum(axis=1)


def _lut_to_dense(indices, lut, shape=None, vector_axis=None, **_):
    lut = np.asarray(lut, np.float32)
    if shape is not None:
        # iOS16 form: one table for the tensor, indices bit-packed into uint8.
        shape = _ints(shape)
        index = _unpack_bits(indices, int(round(math.log2(lut.size))), int(np.prod(shape)))
        return lut.reshape(-1)[index].reshape(shape)
    # iOS18 form: one index per element (or per vector); lut is (*blocks, palette size, vector size).
    indices = np.asarray(indices).astype(np.int64)
    blocks, vector = lut.shape[:-2], lut.shape[-1]
    # (coordinate // block size) per axis, broadcast over the indices: memory stays output-sized.
    grid = [(np.arange(full) // (full // b)).reshape([-1 if a == i else 1 for a in range(indices.ndim)])
            for i, (full, b) in enumerate(zip(indices.shape, blocks))]
    values = lut[(*grid, indices)]  # (*indices.shape, vector)
    if vector == 1:
        return values[..., 0]
    # Vector palettisation: each index fills `vector` consecutive elements along vector_axis.
    axis = int(vector_axis) % indices.ndim
    out_shape = list(indices.shape)
    out_shape[axis] *= vector
    return np.moveaxis(values, -1, axis + 1).reshape(out_shape)


def _sparse_to_dense(nonzero_data, mask, shape=None, **_):
    if shape is not None:  # iOS16 form: a flat bit mask (least significant bit first) and the shape
        shape = _ints(shape)
        keep = _unpack_bits(mask, 1, int(np.prod(shape))).astype(bool).reshape(shape)
    else:  # iOS18 form: a uint1 mask with the output's shape
        keep = np.asarray(mask) != 0
    data = np.asarray(nonzero_data)
    dense = np.zeros(keep.shape, np.float32 if data.dtype.kind == "f" else data.dtype)
    dense[keep] = data  # row-major order of the set bits
    return dense


def _lut_to_sparse(indices_mask, indices_nonzero_data, lut, vector_axis=None, **_):
    """iOS18 joint pruning + palettisation: two outputs, (mask, looked-up nonzero values)."""
    indices = _sparse_to_dense(indices_nonzero_data, indices_mask)
    dense = _lut_to_dense(indices, lut, vector_axis=vector_axis)
    mask = np.asarray(indices_mask) != 0
    if np.asarray(lut).shape[-1] > 1:  # a vector index covers `vector` elements along vector_axis
        mask = np.repeat(mask, np.asarray(lut).shape[-1], axis=int(vector_axis) % mask.ndim)
    return mask.astype(np.uint8), dense[mask]


def _sparse_blockwise_shift_scale(data_mask, nonzero_data, scale, offset=None, **_):
    """iOS18 joint pruning + quantisation: two outputs, (mask, dequantised nonzero values)."""
    dense = _blockwise_shift_scale(_sparse_to_dense(nonzero_data, data_mask), scale, offset)
    mask = np.asarray(data_mask) != 0
    return mask.astype(np.uint8), dense[mask]


DECOMPRESSION_OPS: dict[str, Callable[..., Any]] = {
    "constexpr_affine_dequantize": _affine_dequantize,
    "constexpr_blockwise_shift_scale": _blockwise_shift_scale,
    "constexpr_lut_to_dense": _lut_to_dense,
    "constexpr_sparse_to_dense": _sparse_to_dense,
    "constexpr_lut_to_sparse": _lut_to_sparse,
    "constexpr_sparse_blockwise_shift_scale": _sparse_blockwise_shift_scale,
    "constexpr_cast": lambda source_val, output_dtype, **_: _cast(source_val, str(output_dtype)),
}


# --- the program --------------------------------------------------------------------------------------

class _Step:
    """One op, bound once: its function, literal arguments, and which arguments come from the run."""

    __slots__ = ("fn", "fixed", "live", "outputs", "drop")

    def __init__(self, fn, fixed: dict, live: list, outputs: list[tuple[str, bool]]):
        self.fn = fn
        self.fixed = fixed  # name -> value known at load time
        self.live = live  # (name, key) or (name, [(is_key, key or value), ...]) for variadic inputs
        self.outputs = outputs  # (var name, rounds to fp16)
        self.drop: list[str] = []  # values no later step reads: freed after this step


def _is_fp16(var) -> bool:
    from coremltools.converters.mil.mil import types

    return getattr(var, "dtype", None) is types.fp16


# fp16's normal range as float32 bit patterns of |x|: 2^-14 (smallest normal) to 65504 (largest finite)
FP16_NORMAL_BITS = (0x38800000, 0x477FE000)


def _round_fp16(x) -> np.ndarray:
    """float32 -> the nearest fp16 value (ties to even), kept as float32.

    NumPy's float16 cast is scalar code (slower than a ViT's matmuls in total), so values in fp16's
    normal range are rounded on their float32 bits: drop the 13 low mantissa bits, rounding to
    nearest even. The rest (fp16 subnormals, zero, overflow, inf, nan) take NumPy's cast.
    """
    x = np.asarray(x, np.float32)
    if x.ndim == 0:  # ufuncs on 0-d arrays return scalars, which cannot be assigned into
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32)
    low, high = FP16_NORMAL_BITS
    out = bits & 0x7FFFFFFF  # |x|; then one unsigned compare tests both ends (below `low` wraps round)
    out -= low
    odd = out > high - low
    np.right_shift(bits, 13, out=out)
    out &= 1  # the lowest kept bit: a tie rounds to make it 0
    out += 0xFFF
    out += bits
    out &= 0xFFFFE000
    out = out.view(np.float32)
    if odd.any():
        with np.errstate(over="ignore"):  # overflow to inf is what an fp16 engine does too
            out[odd] = x[odd].astype(np.float16).astype(np.float32)
    return out


def _hold(value, fp16: bool):
    """How a value is kept between ops: fp16 results rounded to fp16 but held as fp32; float64 as fp32."""
    if isinstance(value, str):
        return value
    array = np.asarray(value)
    if array.dtype == np.float16:
        return array.astype(np.float32)
    if fp16 and array.dtype.kind == "f":
        return _round_fp16(array)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    return array


def _literal(var):
    """A value the program fixes (a const op's output, or an inline value)."""
    value = var.val
    if value is None:
        raise ValueError(f"no value for {var.name}")
    return value if isinstance(value, str) else _hold(value, _is_fp16(var))


class MilProgram:
    """One function of an ML program (normally `main`), ready to run with NumPy."""

    def __init__(self, function, name: str = "main"):
        from coremltools.converters.mil.mil import types
        from coremltools.converters.mil.mil.types.symbolic import is_symbolic

        self.name = name
        self.input_names = list(function.inputs)
        self.output_names = [v.name for v in function.outputs]
        self.input_shapes = {n: tuple(None if is_symbolic(d) else int(d) for d in v.shape)
                             for n, v in function.inputs.items()}  # None: a flexible dimension
        self.input_dtypes = {n: np.dtype(types.nptype_from_builtin(v.dtype)) for n, v in function.inputs.items()}
        self.op_types = Counter(op.op_type for op in function.operations)
        self.constants: dict[str, Any] = {}
        self.steps: list[_Step] = []
        for op in function.operations:
            self._add(op)
        self._plan_frees()

    def _add(self, op) -> None:
        if op.op_type == "const":
            self.constants[op.outputs[0].name] = _literal(op.outputs[0])
        elif op.op_type in DECOMPRESSION_OPS:
            args = {k: self._constant(v) for k, v in op.inputs.items()}
            result = DECOMPRESSION_OPS[op.op_type](**args)
            for var, value in zip(op.outputs, result if isinstance(result, tuple) else (result,)):
                self.constants[var.name] = _hold(value, _is_fp16(var))
        elif op.op_type in OPS:
            fixed, live = {}, []
            for k, v in op.inputs.items():
                if isinstance(v, (list, tuple)):  # variadic (concat, stack, einsum)
                    parts = [(True, p.name) if self._is_live(p) else (False, self._constant(p)) for p in v]
                    live.append((k, parts))
                elif self._is_live(v):
                    live.append((k, v.name))
                else:
                    fixed[k] = self._constant(v)
            rounds = op.op_type not in EXACT_OPS
            outputs = [(o.name, rounds and _is_fp16(o)) for o in op.outputs]
            self.steps.append(_Step(OPS[op.op_type], fixed, live, outputs))
        else:
            raise UnsupportedOpError(op.op_type, op.name)

    def _is_live(self, var) -> bool:
        return var.name not in self.constants and var.val is None

    def _constant(self, var):
        return self.constants[var.name] if var.name in self.constants else _literal(var)

    def _plan_frees(self) -> None:
        """Free each intermediate after its last reader, so a run's memory stays near one layer's."""
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for _, src in step.live:
                for key in ([src] if isinstance(src, str) else [k for is_key, k in src if is_key]):
                    last[key] = i
        keep = set(self.output_names)
        for key, i in last.items():
            if key not in keep:
                self.steps[i].drop.append(key)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, Any] = {}
        for name in self.input_names:
            if name not in inputs:
                raise ValueError(f"missing input {name!r} (inputs: {', '.join(self.input_names)})")
            env[name] = self._feed(name, inputs[name])
        for step in self.steps:
            args = dict(step.fixed)
            for k, src in step.live:
                args[k] = env[src] if isinstance(src, str) else [env[v] if is_key else v for is_key, v in src]
            result = step.fn(**args)
            for (name, fp16), value in zip(step.outputs, result if isinstance(result, tuple) else (result,)):
                env[name] = _hold(value, fp16)
            for key in step.drop:
                del env[key]
        return {name: self._output(env[name] if name in env else self.constants[name]) for name in self.output_names}

    def _feed(self, name: str, value) -> np.ndarray:
        array = np.asarray(value)
        want = self.input_shapes[name]
        if array.ndim != len(want) or any(w is not None and w != d for w, d in zip(want, array.shape)):
            raise ValueError(f"input {name!r} has shape {array.shape}, the program takes {want}")
        dtype = self.input_dtypes[name]
        if dtype.kind == "f":  # an fp16 input is rounded to fp16 as Core ML would store it
            return _hold(array.astype(np.float32), dtype == np.float16)
        return array.astype(dtype)

    @staticmethod
    def _output(value) -> np.ndarray:
        array = np.asarray(value)  # a copy either way: an output may be a view of a constant
        return array.astype(np.float32) if array.dtype.kind == "f" else array.copy()


def _quiet_coremltools():
    logging.getLogger("coremltools").setLevel(logging.ERROR)  # it warns about every macOS-only proxy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import coremltools as ct
    return ct


def load_program(source, function: str | None = None, weights_dir: str | Path | None = None) -> MilProgram:
    """Read an ML program into an executable MilProgram.

    `source` is a saved .mlpackage directory, a `coremltools.models.MLModel`, or a `Model` spec
    (then `weights_dir` names its weight blobs, if it has any). `function` picks the function to run:
    by default `main`, else the model's default function.
    """
    ct = _quiet_coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load as load_milproto

    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_dir():
            raise ValueError(f"{path} is not an .mlpackage directory")
        source = ct.models.MLModel(str(path), skip_model_load=True)
    if isinstance(source, ct.models.MLModel):
        spec = source.get_spec()
        weights_dir = weights_dir or getattr(source, "weights_dir", None)
    else:
        spec = source
    if spec.WhichOneof("Type") != "mlProgram":
        raise ValueError(f"the model holds a {spec.WhichOneof('Type')} model, not an ML program")
    program = load_milproto(spec, spec.specificationVersion, str(weights_dir) if weights_dir else "")
    name = function or ("main" if "main" in program.functions else spec.description.defaultFunctionName)
    if name not in program.functions:
        raise ValueError(f"the ML program has no function {name!r} (functions: {', '.join(program.functions)})")
    return MilProgram(program.functions[name], name)
