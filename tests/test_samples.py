"""The checked-in samples are what samples/README.md says they are."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitexport.inputs import load_images
from vitexport.sources import SourceSpec, load

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_trained_digits_reach_the_recorded_accuracy():
    metrics = json.loads((SAMPLES / "digits" / "metrics.json").read_text())
    loaded = load(SourceSpec("digits", weights=str(SAMPLES / "digits" / "digits_vit.safetensors")))
    x, labels, names = load_images(SAMPLES / "digits" / "holdout", loaded.preprocessing, loaded.input_shape)
    assert len(names) == metrics["holdout_images"] == 360
    with torch.no_grad():
        accuracy = float((loaded.model(torch.from_numpy(x)).argmax(1).numpy() == np.asarray(labels)).mean())
    assert accuracy == pytest.approx(metrics["holdout_accuracy_from_png"], abs=1e-9)
    assert accuracy > 0.9
    assert (SAMPLES / "digits" / "digits_vit.safetensors").stat().st_size < 5_000_000


def test_photos_are_rgb_with_a_256_px_shorter_side():
    photos = sorted((SAMPLES / "images").glob("*.jpg"))
    assert len(photos) >= 4
    for photo in photos:
        with Image.open(photo) as im:
            assert im.mode == "RGB" and min(im.size) == 256


@pytest.mark.slow
def test_training_script_runs(tmp_path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(SAMPLES / "train_digits.py"), "--epochs", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "digits_vit.safetensors").exists() and len(list((tmp_path / "holdout").glob("*.png"))) == 360
    assert json.loads((tmp_path / "metrics.json").read_text())["epochs"] == 1
