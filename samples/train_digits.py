"""Train the `digits` preset (a 4-block ViT on 8x8 handwritten digits) so verification has a real,
trained model and a labelled held-out set that need no download.

Data: scikit-learn's bundled copy of the UCI handwritten digits (1797 images, 8x8, values 0..16).
Pixels: value / 16 -> [0, 1] -> (x - 0.5) / 0.5, the preset's mean/std.
Held-out images are written as 8-bit grayscale PNGs `LABEL_INDEX.png` with value round(v / 16 * 255),
so reading a PNG and dividing by 255 gives back the [0, 1] pixels (to within 1/510).

Usage: python samples/train_digits.py [--epochs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vitexport.configs import get_preset
from vitexport.model import build

SEED = 0


def load_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.images.astype(np.float32) / 16.0  # (n, 8, 8) in [0, 1]
    return train_test_split(x, digits.target, test_size=0.2, random_state=SEED, stratify=digits.target)


def normalise(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((pixels[:, None] - 0.5) / 0.5).float()  # (n, 8, 8) -> (n, 1, 8, 8)


def accuracy(model, pixels: np.ndarray, labels: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(normalise(pixels)).argmax(1).numpy() == labels).mean())


def train(epochs: int) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    x_train, x_test, y_train, y_test = load_split()
    model = build(get_preset("digits"), seed=SEED).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)
    steps_per_epoch = int(np.ceil(len(x_train) / 64))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=4e-3, total_steps=epochs * steps_per_epoch)
    generator = np.random.default_rng(SEED)
    start = time.perf_counter()
    for _ in range(epochs):
        order = generator.permutation(len(x_train))
        for i in range(0, len(order), 64):
            batch = order[i:i + 64]
            pixels = x_train[batch]
            loss = F.cross_entropy(model(normalise(pixels)), torch.from_numpy(y_train[batch]).long(),
                                   label_smoothing=0.05)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
    seconds = time.perf_counter() - start
    model.eval()
    metrics = {"holdout_accuracy": accuracy(model, x_test, y_test), "train_accuracy": accuracy(model, x_train, y_train),
               "holdout_images": int(len(x_test)), "epochs": epochs, "train_seconds": round(seconds, 1),
               "threads": 2, "seed": SEED, "torch": torch.__version__}
    return model, metrics


def write_holdout(folder: Path) -> float:
    """Write the held-out set as PNGs; return the accuracy the PNG pixels would give (checked later)."""
    from PIL import Image

    _, x_test, _, y_test = load_split()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    for i, (pixels, label) in enumerate(zip(x_test, y_test)):
        Image.fromarray(np.round(pixels * 255).astype(np.uint8), mode="L").save(folder / f"{label}_{i:04d}.png")
    return len(x_test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "digits")
    args = parser.parse_args()
    from safetensors.torch import save_file

    model, metrics = train(args.epochs)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(model.state_dict(), str(args.out / "digits_vit.safetensors"))
    write_holdout(args.out / "holdout")
    # The PNGs round pixels to 1/255: the accuracy a user gets from them is the one to record.
    from vitexport.inputs import load_images

    x, labels, _ = load_images(args.out / "holdout", {"mean": [0.5], "std": [0.5]}, (1, 1, 8, 8))
    with torch.no_grad():
        metrics["holdout_accuracy_from_png"] = float((model(torch.from_numpy(x)).argmax(1).numpy() ==
                                                      np.asarray(labels)).mean())
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
