"""Resizing: upsample_* (scale factors), resize_* (target sizes), iOS17 resize, and crop.

Bilinear resizing is separable: each resized axis is interpolated on its own. Where an output pixel
samples the input is MIL's sampling grid (resize_bilinear's sampling modes; upsample_bilinear's
align_corners / half_pixel_centers pick one of them), clipped to the input. Nearest-neighbour
resizing picks input pixel floor(i * in / out), computed in integers so that exact ratios stay exact.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.args import ints


def grid(size_in: int, size_out: int, mode: str) -> np.ndarray:
    """The input coordinate each output pixel samples, in float64."""
    i = np.arange(size_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if size_out == 1:
            points = np.full(1, (size_in - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0)
        else:
            points = i * ((size_in - 1) / (size_out - 1))
    elif mode == "DEFAULT":
        points = i * (size_in / size_out)
    elif mode == "OFFSET_CORNERS":
        delta = max(1, size_in - 1) / size_out
        points = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        points = (i + 0.5) * (size_in / size_out) - 0.5
    else:
        raise UnsupportedOpError("resize_bilinear", detail=f"sampling_mode {mode!r}")
    return np.clip(points, 0, size_in - 1)


def _linear_along(x, axis: int, size_out: int, mode: str) -> np.ndarray:
    size_in = x.shape[axis]
    points = grid(size_in, size_out, mode)
    low = np.floor(points).astype(np.int64)
    high = np.minimum(low + 1, size_in - 1)
    shape = [1] * x.ndim
    shape[axis] = size_out
    frac = (points - low).astype(np.float32).reshape(shape)
    a, b = np.take(x, low, axis=axis), np.take(x, high, axis=axis)
    return a + (b - a) * frac


def _nearest_along(x, axis: int, size_out: int) -> np.ndarray:
    size_in = x.shape[axis]
    index = np.minimum(np.arange(size_out) * size_in // size_out, size_in - 1)
    return np.take(x, index, axis=axis)


def _resize(x, sizes: dict[int, int], mode: str | None) -> np.ndarray:
    """Resize the axes in `sizes` (axis -> length): bilinear in sampling `mode`, nearest when mode is None."""
    for axis, size_out in sizes.items():
        x = _nearest_along(x, axis, size_out) if mode is None else _linear_along(x, axis, size_out, mode)
    return x


def _scaled(size: int, scale) -> int:
    # In float32, as coremltools infers the output shape: a scale of 5/3 on 3 pixels makes 5 (float64: 4).
    return int(np.floor(np.float32(scale) * np.float32(size)))


def _upsample_bilinear(x, scale_factor_height=1, scale_factor_width=1, align_corners=True, half_pixel_centers=None,
                       **_):
    if align_corners:
        mode = "STRICT_ALIGN_CORNERS"
    else:  # iOS15 has no half_pixel_centers: it samples at pixel centres; iOS16 defaults to the same
        mode = "UNALIGN_CORNERS" if half_pixel_centers is None or bool(half_pixel_centers) else "DEFAULT"
    h, w = x.shape[-2:]
    return _resize(x, {x.ndim - 2: _scaled(h, scale_factor_height), x.ndim - 1: _scaled(w, scale_factor_width)}, mode)


def _upsample_nearest_neighbor(x, scale_factor_height=1, scale_factor_width=1, **_):
    h, w = x.shape[-2:]
    return _resize(x, {x.ndim - 2: _scaled(h, scale_factor_height), x.ndim - 1: _scaled(w, scale_factor_width)}, None)


def _resize_bilinear(x, target_size_height=1, target_size_width=1, sampling_mode="DEFAULT", **_):
    return _resize(x, {x.ndim - 2: int(target_size_height), x.ndim - 1: int(target_size_width)}, str(sampling_mode))


def _resize_nearest_neighbor(x, target_size_height, target_size_width, **_):
    return _resize(x, {x.ndim - 2: int(target_size_height), x.ndim - 1: int(target_size_width)}, None)


def _resize_ios17(x, shape, resized_dims, interpolation_mode="LINEAR", sampling_mode="DEFAULT", **_):
    """The trailing `resized_dims` axes of x take their sizes from the end of `shape` (0: keep x's size)."""
    shape, count = ints(shape), int(resized_dims)
    sizes = {}
    for j in range(count):
        axis = x.ndim - count + j
        want = shape[len(shape) - count + j]
        sizes[axis] = x.shape[axis] if want == 0 else want
    if interpolation_mode == "LINEAR":
        return _resize(x, sizes, str(sampling_mode))
    if interpolation_mode == "NEAREST_NEIGHBOR" and sampling_mode == "DEFAULT":
        return _resize(x, sizes, None)
    raise UnsupportedOpError("resize", detail=f"{interpolation_mode} with sampling_mode {sampling_mode!r}")


def _crop(x, crop_height, crop_width, **_):
    top, bottom = ints(crop_height)
    left, right = ints(crop_width)
    h, w = x.shape[-2:]
    return x[..., top:h - bottom, left:w - right]


OPS: dict[str, Callable[..., Any]] = {
    "upsample_bilinear": _upsample_bilinear,
    "upsample_nearest_neighbor": _upsample_nearest_neighbor,
    "resize_bilinear": _resize_bilinear,
    "resize_nearest_neighbor": _resize_nearest_neighbor,
    "resize": _resize_ios17,
    "crop": _crop,
}
