"""Normalisation: layer_norm, batch_norm, instance_norm, l2_norm, local_response_norm.

Statistics are computed in fp32 on the values as held (fp16 programs hold fp16 values in fp32).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.ops.args import as_axes


def _channel_shape(rank: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * (rank - 2)  # a per-channel vector along axis 1


def _normalise(x, axes, epsilon) -> np.ndarray:
    y = x - x.mean(axis=axes, keepdims=True)
    variance = np.square(y).mean(axis=axes, keepdims=True)  # biased, as every norm here defines it
    y /= np.sqrt(variance + float(epsilon))
    return y


def _layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_):
    y = _normalise(x, as_axes(axes, x.ndim) if axes is not None else tuple(range(x.ndim)), epsilon)
    if gamma is not None:
        y *= gamma
    if beta is not None:
        y += beta
    return y


def _batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_):
    shape = _channel_shape(x.ndim)
    y = (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + float(epsilon))
    if gamma is not None:
        y = y * gamma.reshape(shape)
    return y + beta.reshape(shape) if beta is not None else y


def _instance_norm(x, gamma=None, beta=None, epsilon=1e-5, **_):
    """Each (sample, channel) over its spatial axes."""
    y = _normalise(x, tuple(range(2, x.ndim)), epsilon)
    if gamma is not None:
        y *= gamma.reshape(_channel_shape(x.ndim))
    if beta is not None:
        y += beta.reshape(_channel_shape(x.ndim))
    return y


def _l2_norm(x, epsilon=1e-6, **_):
    """x / sqrt(sum x^2 + epsilon) over the last three axes (all of them for a rank-3 input)."""
    axes = tuple(range(max(x.ndim - 3, 0), x.ndim))
    return x / np.sqrt(np.square(x).sum(axis=axes, keepdims=True) + float(epsilon))


def _local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, **_):
    """x / (k + alpha / size * sum of x^2 over `size` neighbouring channels)^beta.

    The window around channel c spans size // 2 channels before it and (size - 1) // 2 after it,
    clipped at the ends (PyTorch's convention; an odd size is centred either way).
    """
    size = int(size)
    squares = np.square(x)
    widths = [(0, 0)] * x.ndim
    widths[1] = (size // 2, (size - 1) // 2)
    padded = np.pad(squares, widths)
    total = sum(padded[:, i:i + x.shape[1]] for i in range(size))
    return x / np.power(float(k) + float(alpha) / size * total, float(beta))


OPS: dict[str, Callable[..., Any]] = {
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    "instance_norm": _instance_norm,
    "l2_norm": _l2_norm,
    "local_response_norm": _local_response_norm,
}
