"""Pooling: avg_pool (with or without the padding in the divisor), max_pool and l2_pool, 1-D to 3-D.

Output sizes follow MIL's pooling rule, ceil_mode included: with ceil_mode the last window may run
past the padded input, and a window that would start past the input and its leading padding is
dropped. A window's average divides by the elements it covers inside the padded input
(exclude_padding_from_average=False, PyTorch's count_include_pad) or inside the input alone (True).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.ops.args import ints
from vitexport.backends.coreml_common.mil_eval.ops.conv import conv_padding


def _out_size(size: int, k: int, s: int, before: int, after: int, ceil_mode: bool) -> int:
    span = size + before + after - k
    if not ceil_mode:
        return span // s + 1
    out = math.ceil(span / s) + 1
    if (out - 1) * s >= size + before and (before or after):
        out -= 1
    return out


def _windows(x, kernel, strides, widths, fill) -> np.ndarray:
    """(*x.shape[:2], *out, *kernel): every pooling window, as a strided view of the padded input."""
    padded = np.pad(x, [(0, 0), (0, 0), *widths], constant_values=fill)
    spatial = tuple(range(2, x.ndim))
    view = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=spatial)
    return view[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]


def _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode, op):
    kernel = ints(kernel_sizes)
    nd = len(kernel)
    strides = ints(strides) if strides is not None else [1] * nd
    pads = conv_padding(str(pad_type), pad, x.shape[2:], kernel, strides, [1] * nd, op=op)
    outs = [_out_size(d, k, s, b, a, bool(ceil_mode)) for d, k, s, (b, a) in zip(x.shape[2:], kernel, strides, pads)]
    # ceil_mode's last window may need room past the padding: `extra` zeros that nothing counts
    extra = [max((o - 1) * s + k - (d + b + a), 0) for o, s, k, d, (b, a) in zip(outs, strides, kernel, x.shape[2:], pads)]
    return kernel, strides, pads, outs, extra


def _crop(windows, outs):
    return windows[(slice(None), slice(None), *(slice(0, o) for o in outs))]


def _reduce_windows(x, kernel, strides, widths, outs, fill, reduce):
    windows = _crop(_windows(x, kernel, strides, widths, fill), outs)
    return reduce(windows, axis=tuple(range(-len(kernel), 0)))


def _avg_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, exclude_padding_from_average=False,
              ceil_mode=False, **_):
    kernel, strides, pads, outs, extra = _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode, "avg_pool")
    widths = [(b, a + e) for (b, a), e in zip(pads, extra)]
    total = _reduce_windows(x, kernel, strides, widths, outs, 0.0, np.sum)
    # The divisor: ones over what counts, zeros over what does not, pooled the same way.
    inside = np.ones((1, 1, *x.shape[2:]), np.float32)
    if exclude_padding_from_average:
        count_widths = widths
    else:
        inside = np.pad(inside, [(0, 0), (0, 0), *pads], constant_values=1.0)
        count_widths = [(0, e) for e in extra]
    count = _reduce_windows(inside, kernel, strides, count_widths, outs, 0.0, np.sum)
    return (total / count).astype(np.float32)


def _max_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=False, **_):
    kernel, strides, pads, outs, extra = _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode, "max_pool")
    widths = [(b, a + e) for (b, a), e in zip(pads, extra)]
    return _reduce_windows(x, kernel, strides, widths, outs, -np.inf, np.max)


def _l2_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=False, **_):
    kernel, strides, pads, outs, extra = _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode, "l2_pool")
    widths = [(b, a + e) for (b, a), e in zip(pads, extra)]
    return np.sqrt(_reduce_windows(np.square(x), kernel, strides, widths, outs, 0.0, np.sum))


OPS: dict[str, Callable[..., Any]] = {
    "avg_pool": _avg_pool,
    "max_pool": _max_pool,
    "l2_pool": _l2_pool,
}
