"""Train the `digits` preset (a 4-block ViT on 8x8 handwritten digits) so verification has a real,
trained model and a labelled held-out set that need no download.

Data: scikit-learn's bundled copy of the UCI handwritten digits (1797 images, 8x8, values 0..16),
split 80/20 with `train_test_split(random_state=0, stratify=labels)`: 1437 to train, 360 held out.

Pixels (one convention for training, the PNGs and any loader):
    png   = round(value / 16 * 255)        8-bit grayscale, numpy rounding (only value 8 is a tie: 127.5 -> 128)
    x     = png / 255                      in [0, 1]; equals value / 16 to within 1/510
    input = (x - 0.5) / 0.5                the preset's mean/std, shape (N, 1, 8, 8)
The model trains on these rounded pixels, so a held-out PNG read back as `png / 255` is exactly the
input the recorded accuracy was measured on; the script checks that before it writes metrics.json.

Held-out files: holdout/<label>_<index>.png, label = the digit, index = position in the held-out split.

Usage: python samples/train_digits.py [--epochs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

SEED = 0
BATCH = 64
LR = 3e-3
WEIGHT_DECAY = 0.05
DEFAULT_EPOCHS = 60
HERE = Path(__file__).resolve().parent


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train PNG values, held-out PNG values, train labels, held-out labels); values uint8 (n, 8, 8)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    png = np.round(digits.images / 16.0 * 255.0).astype(np.uint8)
    return train_test_split(png, digits.target, test_size=0.2, random_state=SEED, stratify=digits.target)


def to_input(png: np.ndarray) -> torch.Tensor:
    """uint8 (n, 8, 8) -> normalised float32 (n, 1, 8, 8); float64 arithmetic, as an image loader does."""
    x = png.astype(np.float64) / 255.0
    return torch.from_numpy(((x - 0.5) / 0.5).astype(np.float32))[:, None]


def predict(model: torch.nn.Module, png: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(to_input(png)).argmax(1).numpy()


def seed_everything() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)  # the thread count changes reduction order, hence the weights
    torch.use_deterministic_algorithms(True)


def train(png: np.ndarray, labels: np.ndarray, epochs: int) -> torch.nn.Module:
    from vitexport.models.presets import get_preset
    from vitexport.models.vit import build

    model = build(get_preset("digits"), seed=SEED).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    steps = epochs * -(-len(png) // BATCH)
    # Cosine decay after a warm-up over the first 10% of steps: AdamW on a fresh transformer wants a gentle start.
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=LR, total_steps=steps, pct_start=0.1,
                                                   anneal_strategy="cos")
    rng = np.random.default_rng(SEED)
    targets = torch.from_numpy(labels).long()
    # No augmentation: one-pixel shifts cut off strokes on these tight 8x8 crops and cost accuracy here.
    for _ in range(epochs):
        order = rng.permutation(len(png))
        for start in range(0, len(order), BATCH):
            batch = order[start:start + BATCH]
            loss = F.cross_entropy(model(to_input(png[batch])), targets[batch], label_smoothing=0.1)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
    return model.eval()


def write_holdout(folder: Path, png: np.ndarray, labels: np.ndarray) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):  # a rerun must not leave files from an older split behind
        old.unlink()
    for index, (pixels, label) in enumerate(zip(png, labels)):
        Image.fromarray(pixels).save(folder / f"{label}_{index:04d}.png")


def read_holdout(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read the PNGs back as a user would: sorted by name, label from the prefix before '_'."""
    from PIL import Image

    files = sorted(folder.glob("*.png"))
    png = np.stack([np.asarray(Image.open(f).convert("L")) for f in files])
    return png, np.array([int(f.stem.split("_", 1)[0]) for f in files])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the digits preset on scikit-learn's bundled digits.")
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument("--out", type=Path, default=HERE / "digits", help="output folder (default: samples/digits)")
    args = parser.parse_args(argv)
    from safetensors.torch import save_file

    seed_everything()
    x_train, x_test, y_train, y_test = load_split()
    start = time.perf_counter()
    model = train(x_train, y_train, args.epochs)
    seconds = time.perf_counter() - start
    correct = int((predict(model, x_test) == y_test).sum())

    args.out.mkdir(parents=True, exist_ok=True)
    write_holdout(args.out / "holdout", x_test, y_test)
    png, png_labels = read_holdout(args.out / "holdout")
    png_correct = int((predict(model, png) == png_labels).sum())
    if png_correct != correct:  # the checked-in images must reproduce the recorded number
        print(f"held-out: {correct} correct in memory but {png_correct} from the PNGs", file=sys.stderr)
        return 1

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.out / "digits_vit.safetensors"))
    metrics = {"holdout_accuracy": correct / len(y_test), "holdout_correct": correct, "holdout_images": len(y_test),
               "train_accuracy": float((predict(model, x_train) == y_train).mean()), "train_images": len(y_train),
               "epochs": args.epochs, "train_seconds": round(seconds, 1), "threads": torch.get_num_threads(),
               "seed": SEED, "torch": torch.__version__}
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"held-out accuracy {metrics['holdout_accuracy']:.4f} ({correct}/{len(y_test)}, the same from the PNGs), "
          f"train accuracy {metrics['train_accuracy']:.4f}, {args.epochs} epochs in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
