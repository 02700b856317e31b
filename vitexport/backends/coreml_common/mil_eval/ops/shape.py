"""Shape, layout and indexing ops: reshape, transpose, slicing, gather, concat, split, pad, and the like."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.args import as_axes, ints


def _reshape(x, shape, **_):
    target = ints(shape)
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]  # 0 copies the input's dim
    return x.reshape(target)


def slice_index(rank, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None) -> tuple:
    """slice_by_index's arguments as a NumPy index (slice_update writes through the same index)."""
    begin, end = ints(begin), ints(end)
    stride = ints(stride) if stride is not None else [1] * rank
    masks = [np.zeros(rank, bool) if m is None else np.asarray(m, bool).reshape(-1)
             for m in (begin_mask, end_mask, squeeze_mask)]
    index = []
    for axis in range(rank):
        if masks[2][axis]:  # squeezed: pick the single index `begin`
            index.append(begin[axis])
        else:
            index.append(slice(None if masks[0][axis] else begin[axis], None if masks[1][axis] else end[axis],
                               stride[axis]))
    return tuple(index)


def _slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    return x[slice_index(x.ndim, begin, end, stride, begin_mask, end_mask, squeeze_mask)]


def _slice_by_size(x, begin, size, **_):
    index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(ints(begin), ints(size)))
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
    return np.squeeze(x, axis=as_axes(axes, x.ndim))


def _expand_dims(x, axes, **_):
    rank = x.ndim + len(ints(axes))
    for a in sorted(a % rank for a in ints(axes)):  # ascending, so earlier inserts do not shift later ones
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
        return tuple(np.split(x, np.cumsum(ints(split_sizes))[:-1], axis=axis))
    return tuple(np.split(x, int(num_splits), axis=axis))


def _pad(x, pad, mode="constant", constant_val=0.0, **_):
    p = ints(pad)
    n = len(p) // 2  # pads the last n dims
    widths = [(0, 0)] * (x.ndim - n) + [(p[2 * i], p[2 * i + 1]) for i in range(n)]
    if mode == "constant":
        return np.pad(x, widths, constant_values=float(constant_val))
    if mode in ("reflect", "replicate"):
        return np.pad(x, widths, mode="reflect" if mode == "reflect" else "edge")
    raise UnsupportedOpError("pad", detail=f"mode {mode!r}")


OPS: dict[str, Callable[..., Any]] = {
    # shapes and layout
    "reshape": _reshape,
    "transpose": lambda x, perm, **_: np.transpose(x, ints(perm)),
    "squeeze": _squeeze,
    "expand_dims": _expand_dims,
    "concat": _concat,
    "split": _split,
    "stack": lambda values, axis, **_: np.stack(values, axis=int(axis)),
    "tile": lambda x, reps, **_: np.tile(x, ints(reps)),
    "pad": _pad,
    # indexing
    "slice_by_index": _slice_by_index,
    "slice_by_size": _slice_by_size,
    "gather": _gather,
    "gather_along_axis": _gather_along_axis,
    # tensors from shapes
    "shape": lambda x, **_: np.asarray(np.shape(x), dtype=np.int32),
    "fill": lambda shape, value=0.0, **_: np.full(ints(shape), value),
    "range_1d": lambda start, end, step, **_: np.arange(start, end, step),
    "identity": lambda x, **_: x,
}
