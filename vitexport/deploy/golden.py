"""Golden data: the inputs a package's check feeds its artifact and what PyTorch answered, as .npy
files any numpy reads with `allow_pickle=False` (and the iOS and Android checks parse: little-endian
float32, C order), described by golden/golden.json.

Seeded inputs are 8-bit pixels normalised as the model expects, so they are exactly what a camera
frame becomes: an image-input Core ML package gets the very same pixels back. Images (`--images`)
are preprocessed exactly as preprocessing.json says. A case holds N rows and the batch it runs at;
the check runs the rows in batches of that size, padding the last by repeating its final row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitexport.core import writer

if TYPE_CHECKING:
    from vitexport.backends.base import Backend
    from vitexport.export.sidecar import ArtifactRecord
    from vitexport.models.sources import LoadedModel
    from vitexport.verify.parity import Tolerance

SCHEMA = "vitexport.golden/1"
FOLDER = "golden"
SEEDED = 2  # seeded cases at the smallest batch; a dynamic batch adds one at the largest


@dataclass
class Case:
    name: str
    batch: int
    x: np.ndarray  # (N, C, H, W) float32, normalised
    source: str  # in words
    images: list[str] | None = None
    labels: list[int] | None = None


def eight_bit_pixels(shape: tuple[int, ...], seed: int, mean, std) -> np.ndarray:
    """Seeded 8-bit pixels (0..255) / 255, normalised with the model's mean and std, as float32."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=shape).astype(np.float64) / 255.0
    m = np.asarray(mean, dtype=np.float64).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float64).reshape(1, -1, 1, 1)
    return ((x - m) / s).astype(np.float32)


def make_cases(be: "Backend", record: "ArtifactRecord", images=None) -> list[Case]:
    """The package's cases: seeded inputs at the smallest batch the artifact is checked at (and the
    largest, when its batch is dynamic), then `images` at the artifact's own batch."""
    from vitexport.core.taskmeasures import NEIGHBOUR_ROWS
    from vitexport.verify.feeds import load_images

    pre = record.source.preprocessing
    shape = tuple(record.source.input_shape)
    channels = shape[1]
    mean, std = pre.get("mean") or [0.0] * channels, pre.get("std") or [1.0] * channels
    checked = be.check_batches(record, record.options.get("max_batch") or 8)
    small, large = min(checked), max(checked)
    # An embedding's neighbours need rows: a case at a static batch of 1 holds several, run one by one.
    rows = small * -(-NEIGHBOUR_ROWS // small) if record.source.task == "embedding" else small
    found = [Case(f"random-{i}", small, eight_bit_pixels((rows, *shape[1:]), record.seed + 1000 + i, mean, std),
                  f"seeded 8-bit pixels (seed {record.seed + 1000 + i}), normalised") for i in range(SEEDED)]
    if large != small:
        found.append(Case(f"random-b{large}", large, eight_bit_pixels((large, *shape[1:]), record.seed + 1000 + SEEDED,
                                                                      mean, std),
                          f"seeded 8-bit pixels (seed {record.seed + 1000 + SEEDED}) at batch {large}, normalised"))
    if images is not None:
        x, labels, names = load_images(images, pre, shape)
        found.append(Case("images", large if record.dynamic_batch else small, x,
                          f"{len(names)} images from {Path(images).name}, preprocessed as preprocessing.json says",
                          names, labels))
    return found


def reference_outputs(loaded: "LoadedModel", record: "ArtifactRecord", cases: list[Case]) -> list[list[np.ndarray]]:
    """PyTorch's outputs for every row of every case, in the artifact's output order, computed in
    the case's own batches (the padding rows dropped)."""
    from vitexport.verify.feeds import chunks
    from vitexport.verify.reference import EagerRunner

    name = record.input_names[0]
    found = []
    with EagerRunner(loaded.model, name, record.output_names) as reference:
        for case in cases:
            parts = [(reference.run({name: part}), real) for part, real in chunks(case.x, case.batch)]
            found.append([np.concatenate([out[o][:real] for out, real in parts]).astype(np.float32)
                          for o in record.output_names])
    return found


def write(folder: Path, cases: list[Case], outputs: list[list[np.ndarray]], record: "ArtifactRecord",
          tol: "Tolerance", input_dtype: str) -> dict[str, Any]:
    """golden/: one input file per case, one file per output, and golden.json; returns golden.json's content."""
    target = folder / FOLDER
    target.mkdir()
    described = []
    for case, outs in zip(cases, outputs):
        _save(target / f"{case.name}.input.npy", case.x)
        files = []
        for i, out in enumerate(outs):
            _save(target / f"{case.name}.output{i}.npy", out)
            files.append(f"{FOLDER}/{case.name}.output{i}.npy")
        entry = {"name": case.name, "batch": case.batch, "rows": int(len(case.x)), "source": case.source,
                 "input": f"{FOLDER}/{case.name}.input.npy", "outputs": files}
        if case.images is not None:
            entry["images"], entry["labels"] = case.images, case.labels
        described.append(entry)
    golden = {"schema": SCHEMA, "input_name": record.input_names[0], "input_dtype": input_dtype,
              "input_layout": "NCHW", "output_names": list(record.output_names), "precision": record.precision,
              "tolerance": {"atol": tol.atol, "rtol": tol.rtol, "min_cosine": tol.min_cosine},
              "cases": described, "task": record.source.task}
    if tol.task_gates:
        golden["task_gates"] = dict(tol.task_gates)
    if record.source.class_scores != "softmax":  # a detector's logits read each class on its own
        golden["class_scores"] = record.source.class_scores
    writer.fill(target / "golden.json", json.dumps(golden, indent=2) + "\n")
    return golden


def _save(path: Path, array: np.ndarray) -> None:
    """Little-endian float32 in C order: what the Swift and Kotlin readers take."""
    writer.fill(path, lambda p: np.save(p, np.ascontiguousarray(array, dtype="<f4"), allow_pickle=False))
