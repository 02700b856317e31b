"""ONNX export (legacy TorchScript-based or dynamo exporter) and ONNX Runtime execution."""

from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailable, ExportError, RuntimeFailure, UsageError
from .base import Artifact, Availability, ExportOptions

EXPORTERS = ("auto", "legacy", "dynamo")
# What each exporter of torch 2.x can write; below 17 LayerNorm is decomposed into primitive ops.
OPSET_RANGE = {"legacy": (13, 20), "dynamo": (17, 23)}
# auto: each exporter fails on models the other handles (legacy: shape arithmetic under a dynamic
# batch; dynamo: 3-D scaled_dot_product_attention), so try legacy, then dynamo, and record which ran.
AUTO_ORDER = ("legacy", "dynamo")
# Protobuf cannot serialise a message over 2 GiB: above this, weights go to an external file.
EXTERNAL_DATA_THRESHOLD = 2_000_000_000


def check_options(options: ExportOptions) -> None:
    if options.exporter not in EXPORTERS:
        raise UsageError(f"unknown exporter {options.exporter!r} (choose {' or '.join(EXPORTERS)})")
    candidates = AUTO_ORDER if options.exporter == "auto" else (options.exporter,)
    if not any(OPSET_RANGE[e][0] <= options.opset <= OPSET_RANGE[e][1] for e in candidates):
        ranges = ", ".join(f"{e} {OPSET_RANGE[e][0]}..{OPSET_RANGE[e][1]}" for e in candidates)
        raise UsageError(f"opset {options.opset} is not supported ({ranges})")
    if options.input_name == options.output_name:
        raise UsageError("input and output names must differ")


class OnnxRuntimeRunner:
    def __init__(self, path: Path, providers: list[str] | None = None, threads: int | None = None,
                 allow_fallback: bool = True):
        try:
            import onnxruntime as ort
        except ImportError:
            raise BackendUnavailable("onnxruntime is not installed: pip install onnxruntime") from None
        so = ort.SessionOptions()
        so.log_severity_level = 3  # errors only: ORT warns loudly about providers it cannot load
        if threads:
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        requested = providers or ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(path), so, providers=requested)
        except Exception as e:
            raise RuntimeFailure(f"ONNX Runtime cannot load {path}: {str(e).splitlines()[0]}") from None
        # ORT silently falls back to CPU when a provider's libraries are missing: report what ran,
        # and refuse a fallback the caller did not allow.
        self.provider = self.session.get_providers()[0]
        if not allow_fallback and self.provider != requested[0]:
            raise BackendUnavailable(f"{requested[0]} was requested but ONNX Runtime ran {self.provider} "
                                     "(its libraries or the GPU are missing); pass --allow-fallback to accept that")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __enter__(self) -> "OnnxRuntimeRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.session = None

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.session.run(None, {k: np.ascontiguousarray(v) for k, v in feed.items()})
        return dict(zip(self.output_names, outputs))


class OnnxBackend:
    name = "onnx"
    suffix = ".onnx"
    builds_from = None

    def availability(self) -> Availability:
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as e:
            return Availability(False, f"{e.name} is not installed")
        return Availability(True)

    def export(self, loaded, options: ExportOptions, out_path: Path) -> Artifact:
        import onnx
        import torch

        check_options(options)
        # Trace at batch >= 2 when the batch is dynamic: the dynamo exporter specialises a size-1 dim.
        batch = max(2, loaded.input_shape[0]) if options.dynamic_batch else loaded.input_shape[0]
        example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
        with tempfile.TemporaryDirectory(dir=out_path.parent) as tmp:
            raw = Path(tmp) / "raw.onnx"
            exporter, fallback_reason = _export_any(loaded.model, example, raw, options)
            model = onnx.load(str(raw), load_external_data=True)
        _embed_metadata(model, loaded, options)
        weight_bytes = sum(len(t.raw_data) or 0 for t in model.graph.initializer)
        external = weight_bytes > EXTERNAL_DATA_THRESHOLD
        data_name = out_path.name + ".data"
        onnx.save_model(model, str(out_path), save_as_external_data=external, all_tensors_to_one_file=True,
                        location=data_name, size_threshold=1024)
        try:
            onnx.checker.check_model(str(out_path), full_check=True)
        except Exception as e:
            raise ExportError(f"onnx.checker rejected the exported model: {str(e).splitlines()[0]}") from None
        info = {
            # The dynamo exporter keeps its own opset when down-conversion fails: record what was written.
            "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
            "opset_requested": options.opset,
            "exporter": exporter,
            "exporter_requested": options.exporter,
            "exporter_fallback_reason": fallback_reason,
            "trace_batch": batch,
            "external_data": data_name if external else None,
            "ir_version": model.ir_version,
            "node_count": len(model.graph.node),
        }
        return Artifact(out_path, self.name, input_names=[options.input_name], output_names=[options.output_name],
                        dynamic_batch=options.dynamic_batch, info=info)

    def load(self, artifact_path: Path, sidecar: dict[str, Any], **options: Any) -> OnnxRuntimeRunner:
        return OnnxRuntimeRunner(artifact_path, options.get("providers"), options.get("threads"),
                                 options.get("allow_fallback", True))

    def lint(self, artifact_path: Path, sidecar: dict[str, Any]) -> list[dict]:
        from ..lint import lint_onnx

        return lint_onnx(artifact_path, sidecar["dynamic_batch"], sidecar.get("target_precision", "fp32"))

    def localize(self, loaded, artifact_path: Path, sidecar: dict[str, Any], x: np.ndarray, tol) -> dict:
        from ..localize import localize_onnx

        return localize_onnx(loaded, artifact_path, x, sidecar["input_names"][0], tol)


def _export_any(model, example, path: Path, options: ExportOptions) -> tuple[str, str | None]:
    """Run the requested exporter (or each of auto's in turn); return the one that worked."""
    candidates = AUTO_ORDER if options.exporter == "auto" else (options.exporter,)
    candidates = [e for e in candidates if OPSET_RANGE[e][0] <= options.opset <= OPSET_RANGE[e][1]]
    errors = []
    for exporter in candidates:
        try:
            _torch_export(model, example, path, options, exporter)
            return exporter, "; ".join(errors) or None
        except ExportError as e:
            errors.append(str(e))
    hint = "" if options.exporter == "auto" else " (try --exporter auto)"
    raise ExportError("; ".join(errors) + hint)


def _root_cause(e: Exception) -> str:
    """The informative line of an exporter error (dynamo's sits under 'Exception summary')."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "## Exception summary" in lines:
        after = lines[lines.index("## Exception summary") + 1:]
        if after:
            return after[0].replace("<class '", "").replace("'>", "")
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch.export logs whole stack traces for failures we report in one line ourselves."""
    loggers = [logging.getLogger(name) for name in ("torch", "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _torch_export(model, example, path: Path, options: ExportOptions, exporter: str) -> None:
    import torch

    from ..sources import export_mode

    names = dict(input_names=[options.input_name], output_names=[options.output_name])
    try:
        with torch.no_grad(), export_mode(), warnings.catch_warnings(), _quiet_torch_logs():
            warnings.simplefilter("ignore")  # tracer chatter; real problems raise or fail parity
            if exporter == "legacy":
                axes = {options.input_name: {0: "batch"}, options.output_name: {0: "batch"}}
                torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=options.opset,
                                  dynamic_axes=axes if options.dynamic_batch else None, do_constant_folding=True,
                                  **names)
            else:
                shapes = {"x": {0: torch.export.Dim("batch", min=1, max=4096)}} if options.dynamic_batch else None
                program = torch.onnx.export(model, (example,), dynamo=True, opset_version=options.opset,
                                            dynamic_shapes=_name_first_arg(model, shapes), optimize=True,
                                            verbose=False, **names)
                program.save(str(path), external_data=True)
    except Exception as e:
        raise ExportError(f"{exporter} exporter failed: {_root_cause(e)[:300]}") from None


def _name_first_arg(model, shapes):
    """dynamic_shapes is keyed by the forward's parameter name, which user models choose freely."""
    if shapes is None:
        return None
    import inspect

    params = [p for p in inspect.signature(model.forward).parameters if p != "self"]
    return {params[0]: shapes["x"]} if params else None


def _embed_metadata(model, loaded, options: ExportOptions) -> None:
    import json

    from .. import __version__

    model.producer_name, model.producer_version = "vitexport", __version__
    meta = {
        "vitexport.source": loaded.spec.model,
        "vitexport.input_shape": json.dumps(list(loaded.input_shape)),
        "vitexport.dynamic_batch": str(options.dynamic_batch).lower(),
        "vitexport.preprocessing": json.dumps(loaded.preprocessing),
    }
    del model.metadata_props[:]
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


BACKEND = OnnxBackend()
