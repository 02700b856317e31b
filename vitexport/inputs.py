"""Deterministic feeds: the same pixels for PyTorch and every backend."""

from __future__ import annotations

import numpy as np


def random_pixels(shape: tuple[int, ...], seed: int, mean=None, std=None) -> np.ndarray:
    """Seeded uniform [0, 1) pixels, normalised like real images would be, as float32 NCHW."""
    rng = np.random.default_rng(seed)
    x = rng.random(shape, dtype=np.float64)
    if mean is not None and std is not None and len(mean) == shape[1]:
        m = np.asarray(mean, dtype=np.float64).reshape(1, -1, 1, 1)
        s = np.asarray(std, dtype=np.float64).reshape(1, -1, 1, 1)
        x = (x - m) / s
    return x.astype(np.float32)


def verification_batches(input_shape: tuple[int, ...], dynamic_batch: bool) -> list[int]:
    """Batch sizes checked: 1 and 3 when the batch is dynamic (3 is not the trace batch), else the fixed one."""
    return [1, 3] if dynamic_batch else [input_shape[0]]
