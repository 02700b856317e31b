"""Weight decompression (constexpr_* ops): Core ML materialises these once at load time, and so do we."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.ops.args import ints
from vitexport.backends.coreml_common.mil_eval.ops.elementwise import cast


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
        shape = ints(shape)
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
        shape = ints(shape)
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


OPS: dict[str, Callable[..., Any]] = {
    "constexpr_affine_dequantize": _affine_dequantize,
    "constexpr_blockwise_shift_scale": _blockwise_shift_scale,
    "constexpr_lut_to_dense": _lut_to_dense,
    "constexpr_sparse_to_dense": _sparse_to_dense,
    "constexpr_lut_to_sparse": _lut_to_sparse,
    "constexpr_sparse_blockwise_shift_scale": _sparse_blockwise_shift_scale,
    "constexpr_cast": lambda source_val, output_dtype, **_: cast(source_val, str(output_dtype)),
}
