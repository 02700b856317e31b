"""Sampling at arbitrary points: resample (PyTorch's grid_sample) and affine (affine_grid + grid_sample).

A coordinate pair is (x, y) = (width, height). Out-of-image points follow padding_mode: `constant` gives
each tap outside the image padding_value; `border` clamps the point to the edge pixels; `reflection`
reflects it about the edge pixels' centres, `symmetric` about their outer edges (PyTorch's reflection
with align_corners True and False respectively).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError


def _to_pixels(c, size: int, mode: str, align_corners: bool) -> np.ndarray:
    c = np.asarray(c, np.float64)
    if mode == "unnormalized":
        return c
    if mode == "normalized_minus_one_to_one":
        return (c + 1) / 2 * (size - 1) if align_corners else ((c + 1) * size - 1) / 2
    if mode == "normalized_zero_to_one":
        return c * (size - 1) if align_corners else c * size - 0.5
    raise UnsupportedOpError("resample", detail=f"coordinates_mode {mode!r}")


def _reflect(p, low: float, high: float) -> np.ndarray:
    """p folded into [low, high] by mirroring at both ends."""
    span = high - low
    if span <= 0:
        return np.zeros_like(p)
    q = np.abs(p - low) % (2 * span)
    return low + np.where(q > span, 2 * span - q, q)


def _fold(p, size: int, padding_mode: str) -> np.ndarray:
    if padding_mode == "constant":
        return p
    if padding_mode == "border":
        return np.clip(p, 0, size - 1)
    if padding_mode == "reflection":
        return _reflect(p, 0.0, size - 1.0)
    if padding_mode == "symmetric":
        return np.clip(_reflect(p, -0.5, size - 0.5), 0, size - 1)
    raise UnsupportedOpError("resample", detail=f"padding_mode {padding_mode!r}")


def _taps(image, rows, cols, padding_value):
    """image (C, H, W) at integer points (H2, W2): (C, H2, W2), padding_value outside the image."""
    h, w = image.shape[-2:]
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    values = image[:, np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)]
    return np.where(inside, values, np.float32(padding_value))


def _resample(x, coordinates, sampling_mode="bilinear", padding_mode="constant", padding_value=0.0,
              coordinates_mode="normalized_minus_one_to_one", align_corners=False, **_):
    h, w = x.shape[-2:]
    out = np.empty((x.shape[0], x.shape[1], *coordinates.shape[1:3]), np.float32)
    for b in range(x.shape[0]):
        cols = _fold(_to_pixels(coordinates[b, ..., 0], w, coordinates_mode, bool(align_corners)), w, padding_mode)
        rows = _fold(_to_pixels(coordinates[b, ..., 1], h, coordinates_mode, bool(align_corners)), h, padding_mode)
        if sampling_mode == "nearest":  # halves round to even, as PyTorch's nearbyint
            out[b] = _taps(x[b], np.rint(rows).astype(np.int64), np.rint(cols).astype(np.int64), padding_value)
        elif sampling_mode == "bilinear":
            r0, c0 = np.floor(rows).astype(np.int64), np.floor(cols).astype(np.int64)
            fr, fc = (rows - r0).astype(np.float32), (cols - c0).astype(np.float32)
            top = _taps(x[b], r0, c0, padding_value) * (1 - fc) + _taps(x[b], r0, c0 + 1, padding_value) * fc
            bottom = _taps(x[b], r0 + 1, c0, padding_value) * (1 - fc) + _taps(x[b], r0 + 1, c0 + 1, padding_value) * fc
            out[b] = top * (1 - fr) + bottom * fr
        else:
            raise UnsupportedOpError("resample", detail=f"sampling_mode {sampling_mode!r}")
    return out


def _affine(x, transform_matrix, output_height, output_width, sampling_mode="bilinear", padding_mode="constant",
            padding_value=0.0, coordinates_mode="normalized_minus_one_to_one", align_corners=False, **_):
    """Each output pixel samples x at transform_matrix (B, 6 = a 2x3 matrix) times its own (x, y, 1)."""
    if coordinates_mode != "normalized_minus_one_to_one":
        raise UnsupportedOpError("affine", detail=f"coordinates_mode {coordinates_mode!r}")

    def base(n: int) -> np.ndarray:  # the output pixels' own normalised coordinates
        if align_corners:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        return (2 * np.arange(n) + 1) / n - 1

    ys, xs = np.meshgrid(base(int(output_height)), base(int(output_width)), indexing="ij")
    points = np.stack([xs, ys, np.ones_like(xs)], axis=-1)  # (H2, W2, 3)
    theta = np.asarray(transform_matrix, np.float64).reshape(-1, 2, 3)
    coordinates = np.einsum("hwk,bjk->bhwj", points, theta)
    return _resample(x, coordinates, sampling_mode, padding_mode, padding_value, coordinates_mode, align_corners)


OPS: dict[str, Callable[..., Any]] = {
    "resample": _resample,
    "affine": _affine,
}
