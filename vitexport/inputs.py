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


DEFAULT_MAX_BATCH = 8


def verification_batches(input_shape: tuple[int, ...], dynamic_batch: bool,
                         max_batch: int = DEFAULT_MAX_BATCH) -> list[int]:
    """Batch sizes checked: 1, 3 (not the trace batch) and the largest expected when the batch is
    dynamic; the fixed one otherwise."""
    return sorted({1, 3, max_batch}) if dynamic_batch else [input_shape[0]]


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".ppm", ".pgm")


def label_of(path) -> int | None:
    """Labels come from the file name's prefix before the first '_' when it is an integer (`3_0017.png`)."""
    prefix = path.stem.split("_", 1)[0]
    return int(prefix) if prefix.isdecimal() and prefix.isascii() else None  # '²'.isdigit() is True


def preprocess(path, preprocessing: dict, shape: tuple[int, ...]) -> np.ndarray:
    """One image -> (C, H, W) float32: resize the shorter side, centre-crop, scale to [0, 1], normalise.

    `crop_pct` (timm's data config) resizes to size / crop_pct before the crop; without it the
    shorter side is resized straight to the target size.
    """
    from PIL import Image

    channels, height, width = shape[1:]
    with Image.open(path) as im:
        im = im.convert("L" if channels == 1 else "RGB")
        crop_pct = preprocessing.get("crop_pct") or 1.0
        scale = max(height, width) / crop_pct / min(im.size)
        resample = Image.Resampling.BICUBIC if preprocessing.get("interpolation") == "bicubic" \
            else Image.Resampling.BILINEAR
        if (im.width, im.height) != (width, height):
            new = (max(width, round(im.width * scale)), max(height, round(im.height * scale)))
            im = im.resize(new, resample)
            left, top = (im.width - width) // 2, (im.height - height) // 2
            im = im.crop((left, top, left + width, top + height))
        pixels = np.asarray(im, dtype=np.float64) / 255.0
    if channels == 1:
        pixels = pixels[None]  # (h, w) -> (1, h, w)
    else:
        pixels = pixels.transpose(2, 0, 1)  # (h, w, c) -> (c, h, w)
    mean = np.asarray(preprocessing.get("mean", [0.0] * channels), dtype=np.float64).reshape(-1, 1, 1)
    std = np.asarray(preprocessing.get("std", [1.0] * channels), dtype=np.float64).reshape(-1, 1, 1)
    return ((pixels - mean) / std).astype(np.float32)


def load_images(directory, preprocessing: dict, shape: tuple[int, ...]) -> tuple[np.ndarray, list[int] | None, list[str]]:
    """Every image in a folder (sorted by name) -> (N, C, H, W), labels when all files carry one, names."""
    from pathlib import Path

    from .errors import UsageError

    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"--images: not a directory: {folder}")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise UsageError(f"--images: no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    try:
        x = np.stack([preprocess(f, preprocessing, shape) for f in files])
    except OSError as e:
        raise UsageError(f"--images: cannot read an image in {folder}: {e}") from None
    labels = [label_of(f) for f in files]
    return x, (labels if all(v is not None for v in labels) else None), [f.name for f in files]


def chunks(x: np.ndarray, batch: int) -> list[tuple[np.ndarray, int]]:
    """Split into batches of exactly `batch` rows (a static model needs them); the last one is padded
    by repeating its final row. Returns (batch array, number of real rows)."""
    out = []
    for start in range(0, len(x), batch):
        part = x[start:start + batch]
        real = len(part)
        if real < batch:
            part = np.concatenate([part, np.repeat(part[-1:], batch - real, axis=0)])
        out.append((part, real))
    return out
