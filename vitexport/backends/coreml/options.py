"""Core ML export options and the rules that hold before anything is converted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitexport.backends.base import ExportOptions
from vitexport.core.errors import UsageError
from vitexport.core.options import option

TARGETS = ("iOS16", "iOS17", "iOS18")
PRECISIONS = ("fp16", "fp32")
# name -> (kind, coremltools options, oldest target that can hold it)
COMPRESSIONS = {
    "int8": ("linear", {"dtype": "int8"}, "iOS16"),
    "int4": ("linear", {"dtype": "int4", "granularity": "per_block", "block_size": 32}, "iOS18"),
    "palette8": ("palette", {"nbits": 8}, "iOS16"),
    "palette6": ("palette", {"nbits": 6}, "iOS16"),
    "palette4": ("palette", {"nbits": 4}, "iOS16"),
}
# Core ML has no open-ended batch: a dynamic batch becomes the sizes every backend is checked at.
DYNAMIC_BATCH_SIZES = (1, 3)


@dataclass(frozen=True)
class CoreMLOptions(ExportOptions):
    precision: str = option("fp16", "What the artifact computes in.", choices=PRECISIONS)
    target: str = option("iOS17", "Where the artifact will run: the oldest iOS it takes (its minimum deployment target).", choices=TARGETS)
    compress: str | None = option(None, "Weight compression (int4 needs iOS18).", choices=tuple(COMPRESSIONS))
    image_input: bool = option(False, "Take RGB 0-255 pixels; the model's mean/std is folded into the program.")
    labels: str | None = option(None, "Class names, one per line (stored in the package metadata).")
    batch_sizes: tuple[int, ...] = option((), "Batch sizes, repeatable or as a comma list (1,4,8), the package "
                                              "takes (enumerated; default: one fixed batch; --dynamic-batch means 1,3 and "
                                              "--max-batch).", minimum=1, maximum=4096, flag="--batch")
    author: str | None = option(None, "Author recorded in the package.")
    license: str | None = option(None, "License recorded in the package.")

    def check(self) -> None:
        if self.compress is not None:
            oldest = COMPRESSIONS[self.compress][2]
            if TARGETS.index(self.target) < TARGETS.index(oldest):
                raise UsageError(f"--compress {self.compress} needs --target {oldest} or newer (got {self.target})")
        if self.labels is not None:
            read_labels(Path(self.labels))
        if self.image_input and self.enumerated_batches():
            raise UsageError("--image-input takes one fixed batch; drop --batch and --dynamic-batch")

    def enumerated_batches(self) -> list[int]:
        """The batch sizes the package accepts when it accepts several; [] for one fixed batch."""
        if self.batch_sizes:
            return sorted(set(self.batch_sizes))
        if self.dynamic_batch:
            return sorted({*DYNAMIC_BATCH_SIZES, self.check_max_batch})
        return []


def read_labels(path: Path) -> list[str]:
    from vitexport.core.jsonfile import read_bounded

    if not path.exists():
        raise UsageError(f"--labels: file not found: {path}")
    try:  # bounded: 16 MiB is some 400,000 class names
        text = read_bounded(path, "--labels file", max_bytes=16 * 2**20).decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"--labels: cannot read {path} as UTF-8 text: {e}") from None
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise UsageError(f"--labels: {path} is empty")
    return labels
