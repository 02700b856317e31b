"""Write samples/images/: scikit-learn's two bundled photos (CC BY 2.0, see images/ATTRIBUTION.md),
whole and cropped, resized so the shorter side is 256 px, saved as JPEG quality 90.

The crops give the set different subjects and framings (a building, a landscape, a close-up) from
two license-clean photos. Re-running gives the same files for the same Pillow/libjpeg.

Usage: python samples/make_images.py [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

SHORTER_SIDE = 256
QUALITY = 90

# name -> (source photo, crop box (left, top, right, bottom) in the 640x427 original, or None for all of it)
VIEWS = {
    "china": ("china.jpg", None),
    "china_pagoda": ("china.jpg", (30, 0, 400, 427)),
    "china_lake": ("china.jpg", (330, 130, 640, 427)),
    "flower": ("flower.jpg", None),
    "flower_closeup": ("flower.jpg", (150, 70, 470, 370)),
}


def resize_shorter_side(image: Image.Image, size: int) -> Image.Image:
    scale = size / min(image.size)
    new = (max(size, round(image.width * scale)), max(size, round(image.height * scale)))
    return image.resize(new, Image.Resampling.BICUBIC)


def make_view(source: str, box: tuple[int, int, int, int] | None) -> Image.Image:
    from sklearn.datasets import load_sample_image

    photo = Image.fromarray(load_sample_image(source))
    if box is not None:
        photo = photo.crop(box)
    return resize_shorter_side(photo, SHORTER_SIDE)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the sample photos.")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "images")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (source, box) in VIEWS.items():
        path = args.out / f"{name}.jpg"
        make_view(source, box).save(path, quality=QUALITY)
        print(f"{path}  {Image.open(path).size}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
