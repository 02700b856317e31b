"""Layout ops that move blocks of values: depth/space and pixel (un)shuffles, space/batch, windows, and
reshapes by reference (flatten2d, reshape_like, fill_like).

depth_to_space keeps TensorFlow's channel order (the block offset varies slowest: channel
(by * b + bx) * C + c); pixel_shuffle keeps PyTorch's (the channel varies slowest: c * b * b + by * b + bx).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.ops.args import ints


def _depth_to_space(x, block_size, **_):
    n, c, h, w = x.shape
    b = int(block_size)
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)  # (n, c', h, by, w, bx)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(x, block_size, **_):
    n, c, h, w = x.shape
    b = int(block_size)
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)  # (n, by, bx, c, h', w')
    return y.reshape(n, c * b * b, h // b, w // b)


def _pixel_shuffle(x, upscale_factor, **_):
    *lead, c, h, w = x.shape
    b = int(upscale_factor)
    y = x.reshape(*lead, c // (b * b), b, b, h, w)
    y = np.moveaxis(y, (-4, -3), (-3, -1))  # (..., c', h, by, w, bx)
    return y.reshape(*lead, c // (b * b), h * b, w * b)


def _pixel_unshuffle(x, downscale_factor, **_):
    *lead, c, h, w = x.shape
    b = int(downscale_factor)
    y = x.reshape(*lead, c, h // b, b, w // b, b)
    y = np.moveaxis(y, (-3, -1), (-4, -3))  # (..., c, by, bx, h', w')
    return y.reshape(*lead, c * b * b, h // b, w // b)


def _space_to_batch(x, block_shape, paddings, **_):
    """Blocks of the padded spatial grid become batch entries: batch (by * bw + bx) * n + i."""
    bh, bw = ints(block_shape)
    pads = ints(paddings)
    x = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // bh, bh, w // bw, bw).transpose(3, 5, 0, 1, 2, 4)  # (by, bx, n, c, h', w')
    return y.reshape(bh * bw * n, c, h // bh, w // bw)


def _batch_to_space(x, block_shape, crops, **_):
    bh, bw = ints(block_shape)
    top, bottom, left, right = ints(crops)
    nb, c, h, w = x.shape
    n = nb // (bh * bw)
    y = x.reshape(bh, bw, n, c, h, w).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * bh, w * bw)
    return y[:, :, top:h * bh - bottom, left:w * bw - right]


def _sliding_windows(x, axis, size, stride=1, **_):
    """Windows of `size` every `stride` along `axis`: a new axis of length `size` right after it."""
    axis, size, stride = int(axis) % x.ndim, int(size), int(stride)
    view = np.lib.stride_tricks.sliding_window_view(x, size, axis=axis)  # window axis last
    view = np.moveaxis(view, -1, axis + 1)
    return np.take(view, np.arange(0, x.shape[axis] - size + 1, stride), axis=axis)


def _flatten2d(x, axis=1, **_):
    axis = int(axis) + (x.ndim if int(axis) < 0 else 0)  # axis may be rank itself: (everything, 1)
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _reshape_like(x, ref_tensors, begins, ends, end_masks, **_):
    shape: list[int] = []
    for ref, begin, end, to_end in zip(ref_tensors, begins, ends, end_masks):
        dims = np.shape(ref)
        shape += dims[int(begin):] if bool(to_end) else dims[int(begin):int(end)]
    return x.reshape(shape)


OPS: dict[str, Callable[..., Any]] = {
    "depth_to_space": _depth_to_space,
    "space_to_depth": _space_to_depth,
    "pixel_shuffle": _pixel_shuffle,
    "pixel_unshuffle": _pixel_unshuffle,
    "space_to_batch": _space_to_batch,
    "batch_to_space": _batch_to_space,
    "sliding_windows": _sliding_windows,
    "flatten2d": _flatten2d,
    "reshape_like": _reshape_like,
    "fill_like": lambda ref_tensor, value=0.0, **_: np.full(np.shape(ref_tensor), value),
}
