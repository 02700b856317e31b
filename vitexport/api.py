"""The Python API, shared by the CLI and Python users.

    from vitexport import api
    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.models.sources import SourceSpec

    result = api.export("onnx", SourceSpec("small"), OnnxOptions(dynamic_batch=True), "out")
    api.verify(result["artifact"])  # raises vitexport.core.errors.ParityError on a mismatch
    api.bench(SourceSpec("tiny"), ["torch", "onnxruntime"], [1, 8])

Results are plain dicts: the `--json` output of the CLI. The work happens in pipeline (export and
verify), checks (what verification runs), staging (publishing) and benchrun (benchmarks).
"""

from __future__ import annotations

from vitexport.backends.base import ExportOptions, RunOptions
from vitexport.bench.run import bench
from vitexport.export.pipeline import Gate, export, verify
from vitexport.models.sources import SourceSpec

__all__ = ["export", "verify", "bench", "ExportOptions", "Gate", "RunOptions", "SourceSpec"]
