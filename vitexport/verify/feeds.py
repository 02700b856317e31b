"""Deterministic feeds: the same pixels for PyTorch and every backend, seeded or from images."""

from __future__ import annotations

from vitexport.core.errors import explained

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

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


def verification_batches(input_shape: tuple[int, ...], dynamic_batch: bool, max_batch: int) -> list[int]:
    """Batch sizes checked: 1, 3 (never the trace batch) and the largest expected when the batch is
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
    shorter side is resized straight to the target size. A Hugging Face model's preprocessing holds
    its image processor's steps (`processor`), which are followed instead.
    """
    import io

    from PIL import Image

    from vitexport.core.jsonfile import read_bounded

    channels, height, width = shape[1:]
    # Read first, bounded: a FIFO or a device among the images would otherwise block Pillow forever.
    data = read_bounded(Path(path), "image", MAX_IMAGE_BYTES)
    # The filter is set before Image.open, which is where Pillow checks the header's size: set after
    # it, an image between the bomb limit and twice it would be decoded with a warning, not refused.
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        opened = Image.open(io.BytesIO(data))
    with warnings.catch_warnings(), opened:
        warnings.simplefilter("error", Image.DecompressionBombWarning)  # decoding checks again
        if preprocessing.get("processor"):
            from vitexport.models.hf.pixels import processor_pixels

            return processor_pixels(opened, preprocessing["processor"], shape)
        from vitexport.models.hf.pixels import eight_bit  # the same 8-bit decoding as a processor's

        im = eight_bit(opened, channels)
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


MAX_IMAGE_BYTES = 256 * 2**20  # a 16k x 16k RGB PNG is about this; more is not a photo to check on
MAX_IMAGES = 10_000  # held in memory at once, with PyTorch's and the artifact's outputs


def printable_name(path) -> str:
    """A file name fit for a message, whatever bytes the file system holds."""
    return os.fsencode(path.name).decode("utf-8", "replace")


def load_images(directory, preprocessing: dict,
                shape: tuple[int, ...]) -> tuple[np.ndarray, list[int] | None, list[str]]:
    """Every image in a folder (sorted by name) -> (N, C, H, W), labels when all files carry one, names."""
    from vitexport.core.errors import UsageError, import_optional

    import_optional("PIL", "real images (--images, calibration)", "samples")  # Pillow decodes them

    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"--images: not a directory: {folder}")
    if shape[1] not in (1, 3):  # ViTMatte's image and trimap, a depth sensor's extra channel: more than a photo
        raise UsageError(f"--images: the model takes {shape[1]} channels and an image gives 3 (RGB) or 1 (grey); "
                         "images alone cannot be its input")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise UsageError(f"--images: no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    if len(files) > MAX_IMAGES:
        raise UsageError(f"--images: {len(files)} images in {folder}; at most {MAX_IMAGES} are checked at once")
    pixels = []
    for f in files:
        try:
            pixels.append(preprocess(f, preprocessing, shape))
        except Exception as e:  # Pillow raises OSError, ValueError, SyntaxError, DecompressionBomb*, ...
            reason = explained(e)
            raise UsageError(f"--images: cannot read {printable_name(f)} in {folder}: {reason}") from None
    labels = [label_of(f) for f in files]
    return np.stack(pixels), (labels if all(v is not None for v in labels) else None), [printable_name(f)
                                                                                        for f in files]


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


@dataclass
class Feed:
    """One input batch of a check: `real` rows are data, the rest pad a fixed batch."""

    name: str  # "random b=3", "images[0:8]"
    x: np.ndarray
    real: int

    @property
    def from_images(self) -> bool:
        return self.name.startswith("images")


def check_feeds(loaded, batches: list[int], seed: int, images=None,
                image_batch: int | None = None) -> tuple[list[Feed], list[int] | None]:
    """Seeded random pixels at each of `batches`, then every image in `images` in batches of
    `image_batch` (default: the largest of `batches`); returns the feeds and the images' labels.
    An embedding model whose batches hold fewer rows than a neighbour needs (a static batch of 1) gets
    more seeded feeds at its batch, so that its rows are compared across them (taskmeasures.over_cases)."""
    from vitexport.core.taskmeasures import NEIGHBOUR_ROWS

    pre = loaded.preprocessing

    def seeded(name: str, b: int, s: int) -> Feed:
        return Feed(name, random_pixels((b, *loaded.input_shape[1:]), s, pre.get("mean"), pre.get("std")), b)

    feeds = [seeded(f"random b={b}", b, seed + b) for b in batches]
    if loaded.task == "embedding" and max(batches) < NEIGHBOUR_ROWS:
        b = max(batches)
        feeds += [seeded(f"random b={b} #{i}", b, seed + 100 + i) for i in range(2, -(-NEIGHBOUR_ROWS // b) + 1)]
    labels = None
    if images is not None:
        x, labels, _names = load_images(images, pre, loaded.input_shape)
        batch = image_batch or max(batches)
        for i, (part, real) in enumerate(chunks(x, batch)):
            feeds.append(Feed(f"images[{i * batch}:{i * batch + real}]", part, real))
    return feeds, labels
