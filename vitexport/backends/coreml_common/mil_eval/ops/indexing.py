"""Indexing beyond slices: gather_nd, the scatters, slice_update, sorting (topk, argsort), cumsum,
band_part, one_hot, non_zero, reverse and reverse_sequence.

Negative indices count from the end of their axis, as MIL allows wherever indices may be negative.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.args import ints
from vitexport.backends.coreml_common.mil_eval.ops.shape import slice_index


def _wrap(indices, sizes) -> np.ndarray:
    indices = np.asarray(indices).astype(np.int64)
    return np.where(indices < 0, indices + sizes, indices)


def _gather_nd(x, indices, batch_dims=0, **_):
    """indices[..., :k] address x[b..., i0, ..., ik-1]: the result is indices.shape[:-1] + x.shape[batch_dims + k:]."""
    batch_dims = int(batch_dims)
    k = indices.shape[-1]
    batch = x.shape[:batch_dims]
    xs = x.reshape(-1, *x.shape[batch_dims:])
    ids = _wrap(indices, np.asarray(x.shape[batch_dims:batch_dims + k])).reshape(xs.shape[0], -1, k)
    rows = [xs[b][tuple(ids[b].T)] for b in range(xs.shape[0])]  # (m, *rest) per batch entry
    return np.stack(rows).reshape(*batch, *indices.shape[batch_dims:-1], *x.shape[batch_dims + k:])


_COMBINE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
            "min": np.minimum}


def _scatter_into(data, index, updates, mode) -> np.ndarray:
    """data with `updates` combined at `index` (a tuple of integer arrays); repeated indices accumulate."""
    out = np.array(data, copy=True)
    if mode == "update":  # the last write wins, in index order
        out[index] = updates
    elif mode in _COMBINE:
        _COMBINE[mode].at(out, index, updates)
    else:
        raise UnsupportedOpError("scatter", detail=f"mode {mode!r}")
    return out


def _scatter(data, indices, updates, axis=0, mode="add", **_):
    """Along `axis`: data[..., indices[i], ...] <- updates[..., i, ...] (any shape of indices)."""
    axis = int(axis) % data.ndim
    ids = _wrap(indices, data.shape[axis])
    grids = np.meshgrid(*[np.arange(n) for n in updates.shape], indexing="ij")
    # updates' axes: data's leading axes, then the indices' axes, then data's trailing axes
    position = ids[tuple(grids[axis:axis + ids.ndim])]
    index = (*grids[:axis], position, *grids[axis + ids.ndim:])
    return _scatter_into(data, index, updates, str(mode))


def _scatter_along_axis(data, indices, updates, axis=0, mode="add", **_):
    axis = int(axis) % data.ndim
    grids = list(np.meshgrid(*[np.arange(n) for n in indices.shape], indexing="ij"))
    grids[axis] = _wrap(indices, data.shape[axis])
    return _scatter_into(data, tuple(grids), updates, str(mode))


def _scatter_nd(data, indices, updates, mode="add", **_):
    k = indices.shape[-1]
    ids = _wrap(indices, np.asarray(data.shape[:k])).reshape(-1, k)
    flat = updates.reshape(ids.shape[0], *data.shape[k:])
    return _scatter_into(data, tuple(ids.T), flat, str(mode))


def _slice_update(x, update, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    out = np.array(x, copy=True)
    out[slice_index(x.ndim, begin, end, stride, begin_mask, end_mask, squeeze_mask)] = update
    return out


def _order(x, axis: int, ascending: bool) -> np.ndarray:
    """Indices that sort along `axis`; a stable sort, so equal values keep their order."""
    return np.argsort(x if ascending else -x, axis=axis, kind="stable")


def _topk(x, k=1, axis=-1, ascending=False, sort=True, return_indices=True, **_):
    axis = int(axis) % x.ndim
    order = np.take(_order(x, axis, bool(ascending)), np.arange(int(k)), axis=axis)
    values = np.take_along_axis(x, order, axis=axis)
    return values, order.astype(np.int32)


def _cumsum(x, axis=0, exclusive=False, reverse=False, **_):
    axis = int(axis) % x.ndim
    data = np.flip(x, axis) if reverse else x
    total = np.cumsum(data, axis=axis, dtype=data.dtype)
    if exclusive:  # each position sums what comes strictly before it
        total = np.concatenate([np.zeros_like(np.take(total, [0], axis=axis)),
                                np.take(total, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(total, axis) if reverse else total


def _band_part(x, lower=-1, upper=-1, **_):
    rows, cols = x.shape[-2:]
    m, n = np.arange(rows)[:, None], np.arange(cols)[None, :]
    keep = ((int(lower) < 0) | (m - n <= int(lower))) & ((int(upper) < 0) | (n - m <= int(upper)))
    return np.where(keep, x, np.zeros((), x.dtype))


def _one_hot(indices, one_hot_vector_size, axis=-1, on_value=1, off_value=0, **_):
    size = int(np.asarray(one_hot_vector_size).reshape(-1)[0])
    hot = np.asarray(indices)[..., None] == np.arange(size)
    on, off = np.asarray(on_value), np.asarray(off_value)
    out = np.where(hot, on, off).astype(np.result_type(on, off))
    return np.moveaxis(out, -1, int(axis) % out.ndim)


def _reverse(x, axes=None, **_):
    return np.flip(x, axis=None if axes is None else tuple(a % x.ndim for a in ints(axes)))


def _reverse_sequence(x, lengths, seq_axis=0, batch_axis=0, **_):
    """Per batch entry b, reverse the first lengths[b] elements along seq_axis."""
    seq_axis, batch_axis = int(seq_axis) % x.ndim, int(batch_axis) % x.ndim
    out = np.array(x, copy=True)
    for b, length in enumerate(ints(lengths)):
        index = [slice(None)] * x.ndim
        index[batch_axis] = b
        index[seq_axis] = slice(0, length)
        where = tuple(index)
        seq = seq_axis - (seq_axis > batch_axis)  # the sequence axis once the batch axis is indexed away
        out[where] = np.flip(x[where], axis=seq)
    return out


OPS: dict[str, Callable[..., Any]] = {
    "gather_nd": _gather_nd,
    "scatter": _scatter,
    "scatter_along_axis": _scatter_along_axis,
    "scatter_nd": _scatter_nd,
    "slice_update": _slice_update,
    "topk": _topk,
    "argsort": lambda x, axis=-1, ascending=False, **_: _order(x, int(axis) % x.ndim, bool(ascending)).astype(np.int32),
    "cumsum": _cumsum,
    "band_part": _band_part,
    "one_hot": _one_hot,
    "non_zero": lambda x, **_: np.argwhere(x).astype(np.int32),
    "reverse": _reverse,
    "reverse_sequence": _reverse_sequence,
}
