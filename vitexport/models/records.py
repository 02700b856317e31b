"""What is recorded of a model: `Built`, what a spec's builder (a preset, torchvision, timm, a Hugging
Face folder, the user's module) hands to `sources.load`, and `SourceRecord`, what a sidecar keeps so
the same model can be rebuilt later. Both here so builders and sidecars need not import the loader."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vitexport.models.presets import ViTConfig


@dataclass
class Built:
    """What a spec's builder hands to `load`, which finishes every kind of model the same way."""

    model: Any  # torch.nn.Module
    config: ViTConfig | None = None
    input_shape: tuple[int, ...] | None = None
    preprocessing: dict[str, Any] | None = None
    name: str | None = None  # base of the artifact's name (default: the spec after its prefix)
    weights_sha256: str | None = None  # weights the builder read itself (a Hugging Face directory's)
    weights_file: str | None = None
    notes: list[str] = field(default_factory=list)
    task: str | None = None  # what the model does (vitexport.verify.tasks.TASKS); None: its `task` attribute
    class_scores: str | None = None  # a detector's: softmax or sigmoid (core.taskmeasures); None: its attribute


@dataclass
class SourceRecord:
    """The model an artifact was made from, as `vitexport.models.sources.load` can rebuild it."""

    spec: dict[str, Any]  # SourceSpec.to_dict()
    kind: str
    config: dict[str, Any] | None
    weights_sha256: str | None
    input_shape: list[int]
    preprocessing: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what vitexport chose or changed to load and export it
    # A model held in memory: where its reference program lives, beside the artifact, and what it was
    # made from ({"file", "sha256", "class", "params_sha256", "feeds"}); None for every other source.
    reference: dict[str, Any] | None = None
    task: str = "classification"  # what the model does: which agreement its checks report and gate on
    class_scores: str = "softmax"  # how a detector's class logits read (vitexport.core.taskmeasures.CLASS_SCORES)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def model(self) -> str:
        return self.spec["model"]
