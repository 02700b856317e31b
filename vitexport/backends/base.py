"""What every backend module provides.

A backend turns a resolved PyTorch model (or another backend's artifact) into a file on disk,
and loads such a file into a Runner. Export and run are separate so an artifact built on one
machine can be verified or benchmarked on another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""


@dataclass
class Artifact:
    """A written artifact and the backend-specific facts its sidecar records."""

    path: Path
    backend: str
    precision: str = "fp32"
    input_names: list[str] = field(default_factory=lambda: ["pixel_values"])
    output_names: list[str] = field(default_factory=lambda: ["logits"])
    dynamic_batch: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # opset, exporter, versions, ...


class Runner(Protocol):
    """Owns a session/engine/buffers; ``run`` blocks and returns host arrays."""

    provider: str  # what actually ran: "CPUExecutionProvider", "torch-cpu", "mil-evaluator", ...

    def __enter__(self) -> "Runner": ...

    def __exit__(self, *exc: object) -> None: ...

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    name: str  # registry key and CLI command: "onnx", "torchscript", ...
    suffix: str  # ".onnx", ".pt", ".mlpackage", ".engine"
    builds_from: str | None  # another backend's name whose artifact this one starts from

    def availability(self) -> Availability: ...

    def load(self, artifact_path: Path, sidecar: dict[str, Any], **options: Any) -> Runner: ...


@dataclass
class ExportOptions:
    """Options shared by the exporters; each backend reads the ones it understands."""

    dynamic_batch: bool = False
    input_name: str = "pixel_values"
    output_name: str = "logits"
    opset: int = 17
    exporter: str = "auto"  # "legacy" (TorchScript-based), "dynamo" (torch.export-based), or auto: legacy then dynamo
    precision: str = "fp32"
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific options
