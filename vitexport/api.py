"""The Python API, shared by the CLI and Python users: the stable names (internal module paths may
change between releases; these do not).

    from vitexport import api
    from vitexport.backends.onnx.options import OnnxOptions

    model = api.build_model(api.SourceSpec("small"))  # the nn.Module an export of "small" starts from
    result = api.export("onnx", api.SourceSpec("small"), OnnxOptions(dynamic_batch=True), "out")
    api.verify(result["artifact"])  # raises vitexport.core.errors.ParityError on a mismatch
    api.bench(api.SourceSpec("tiny"), ["torch", "onnxruntime"], [1, 8])

Results are plain dicts: the `--json` output of the CLI. Each backend's options class lives in its
package (`vitexport.backends.NAME.options`) and subclasses `ExportOptions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitexport.backends.base import ExportOptions, RunOptions
from vitexport.bench import run as _run
from vitexport.export.pipeline import Gate, export, verify
from vitexport.models.sources import SourceSpec

if TYPE_CHECKING:
    import torch

__all__ = ["build_model", "export", "verify", "bench", "ExportOptions", "Gate", "RunOptions", "SourceSpec"]


def bench(spec: SourceSpec | None, targets: list[str], batches: list[int] | str, **options: Any) -> dict[str, Any]:
    """Time `targets` (bench rows: "torch", "onnxruntime", "openvino", ...) at `batches` (or "auto") on
    the model of `spec`, or on `artifacts=[...]` already exported; write the report files (JSON, CSV,
    Markdown, plot) into `out_dir` and return the report. Every keyword of `vitexport bench` is an
    option here (threads, budget_s, rounds, baseline, max_slowdown, ...: see
    `vitexport.bench.run.bench`). Slower than a baseline beyond its margin raises RegressionError
    carrying the report, after the files are written."""
    from vitexport.report.files import write_all

    return _run.bench(spec, targets, batches, write_files=write_all, **options)


def build_model(spec: SourceSpec | str) -> "torch.nn.Module":
    """The eval-mode `nn.Module` an export of `spec` starts from, built exactly as the export builds it:
    the same seed, the same weights (checked and loaded the same way), lazy layers materialised. Use it
    to fine-tune or inspect what you export; exporting the module you get back is `export(...)` of
    the same spec. A string is a model spec as the CLI takes it (`tiny`, `timm:NAME`, `file.py:factory`)."""
    from vitexport.models.sources import load

    return load(SourceSpec(spec) if isinstance(spec, str) else spec).model
