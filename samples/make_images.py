"""Write the sample photos: scikit-learn's two bundled photos (CC BY 2.0, see samples/images/ATTRIBUTION.md),
resized so the shorter side is 256 px, plus two further crops of each, as JPEG.

Usage: python samples/make_images.py
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

OUT = Path(__file__).resolve().parent / "images"


def shorter_side(image: Image.Image, size: int) -> Image.Image:
    scale = size / min(image.size)
    return image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.BICUBIC)


def main() -> None:
    from sklearn.datasets import load_sample_image

    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("china", "flower"):
        photo = Image.fromarray(load_sample_image(f"{name}.jpg"))
        shorter_side(photo, 256).save(OUT / f"{name}.jpg", quality=90)
        w, h = photo.size
        # Two tighter views of the same photo: left and right halves, so the set has more than two scenes.
        shorter_side(photo.crop((0, 0, w // 2, h)), 256).save(OUT / f"{name}_left.jpg", quality=90)
        shorter_side(photo.crop((w // 2, 0, w, h)), 256).save(OUT / f"{name}_right.jpg", quality=90)
    print(sorted(p.name for p in OUT.glob("*.jpg")))


if __name__ == "__main__":
    main()
