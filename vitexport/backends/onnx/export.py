"""ONNX export with the legacy (TorchScript-based) or the dynamo (torch.export) exporter."""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

from vitexport.backends.base import output_names
from vitexport.backends.onnx.external import external_bytes, relocate
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.backends.onnx_common.exporters import BIG_MODEL_BYTES
from vitexport.core.environment import quiet_loggers, sha256_array
from vitexport.core.errors import ExportError, explained

# Weights go to an external file (NAME.onnx.data, streamed there) from 1 GB: inline, they would be in
# memory twice while the graph is written, and again while ONNX Runtime parses it (ViT-L: 4.7x its
# weights in all). Protobuf cannot serialise a message over 2 GB anyway.
EXTERNAL_DATA_THRESHOLD = BIG_MODEL_BYTES


def export_onnx(loaded, options: OnnxOptions, out_path: Path, calibration=None) -> dict:
    """Write `out_path` (and `out_path.data` for models over 2 GB); return the facts the sidecar records.

    The fp32 graph is exported first; `--optimize`, `--precision fp16` and `--precision int8` derive
    the published graph from it (`calibration`: the static int8 images as an (N, C, H, W) array)."""
    import onnx
    import torch

    # Trace at batch >= 2 when the batch is dynamic: the dynamo exporter specialises a size-1 dim.
    batch = max(2, loaded.input_shape[0]) if options.dynamic_batch else loaded.input_shape[0]
    example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
    if loaded.exclusive:  # nobody else holds the model: its weights may take the graph's order
        from vitexport.backends.onnx.layout import transposed_linears

        transposed_linears(loaded.model)
    with tempfile.TemporaryDirectory(dir=out_path.parent) as tmp:
        work = Path(tmp)
        raw = work / "raw.onnx"
        exporter, fallback_reason = loaded.remembered(
            ("onnx-export", options.exporters(), options.opset, options.dynamic_batch, options.input_name,
             tuple(output_names(loaded, options)), batch), raw,
            lambda: _export_any(loaded.model, example, raw, options, output_names(loaded, options)))
        info = {"opset_requested": options.opset, "exporter": exporter, "exporter_requested": options.exporter,
                "exporter_fallback_reason": fallback_reason, "trace_batch": batch}
        final = derive(raw, work, options, loaded, calibration, info)
        model = onnx.load(str(final), load_external_data=False)  # the graph alone: its weights stay in files
        _embed_metadata(model, loaded, options)
        data_name = out_path.name + ".data"
        inline = sum(len(t.raw_data) for t in model.graph.initializer)
        external = inline + external_bytes(model, final.parent) > EXTERNAL_DATA_THRESHOLD
        if external and not inline > EXTERNAL_DATA_THRESHOLD:  # the weights already in files: stream them
            # Streamed from the exporter's file into the published one: the weights never in memory here.
            relocate(model, final.parent, out_path.with_name(data_name))
            out_path.write_bytes(model.SerializeToString())
        else:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(final.parent))
            onnx.save_model(model, str(out_path), save_as_external_data=external, all_tensors_to_one_file=True,
                            location=data_name, size_threshold=1024)
    try:
        onnx.checker.check_model(str(out_path), full_check=True)
    except Exception as e:
        raise ExportError(f"onnx.checker rejected the exported model: {explained(e)}") from None
    # The dynamo exporter keeps its own opset when down-conversion fails: record what was written.
    info["opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    info.update(external_data=data_name if external else None, ir_version=model.ir_version,
                node_count=len(model.graph.node))
    return info


def derive(raw: Path, work: Path, options: OnnxOptions, loaded, calibration, info: dict) -> Path:
    """The published graph from the exported fp32 one: optimised, then converted to fp16 or int8."""
    graph = raw
    if options.optimize != "none" or options.precision == "int8":
        # int8 always starts from onnxslim's graph: measured faster than ONNX Runtime's own pre-processing.
        chosen = "slim" if options.optimize in ("none", "auto") and options.precision == "int8" else options.optimize
        graph = optimized(raw, work, chosen, loaded, info,
                          measure=options.precision == "fp32" and options.measure_gain)
    if options.precision == "fp16":
        from vitexport.backends.onnx_common.fp16 import convert_file
        from vitexport.backends.onnx_common.quantize import matches

        keep = ("LayerNormalization", "Softmax") + options.keep_fp32
        target = work / "fp16.onnx"
        info["fp16"] = convert_file(graph, target, lambda op, name: matches(keep, op, name))
        return target
    if options.precision == "int8":
        from vitexport.backends.onnx_common.quantize import quantize_for_ort

        target = work / "int8.onnx"
        # Kept in the memo like the graphs it starts from: optimize publishes its pick by exporting it
        # again under the final name, and quantising ViT-B again would take as long as the first time.
        key = ("onnx-int8", _digest(graph), options.quant, options.per_channel, options.keep_fp32,
               options.search_keep, options.calibration_method, options.input_name,
               None if calibration is None else sha256_array(calibration))
        info["int8"] = dict(loaded.remembered(
            key, target, lambda: quantize_for_ort(graph, target, options, options.input_name, calibration)))
        info["int8"]["preprocessed_with"] = info["optimize"]["tool"]
        return target
    return graph


def optimized(raw: Path, work: Path, how: str, loaded, info: dict, measure: bool) -> Path:
    """Run the optimiser(s) asked for; with `measure`, time each against the plain graph here and keep
    the plain graph when nothing is measurably faster (and say so)."""
    from vitexport.backends.onnx.optimize import OPTIMIZERS, speedup
    from vitexport.verify.feeds import random_pixels

    names = list(OPTIMIZERS) if how == "auto" else [how]
    feed = {_input_name(raw): random_pixels((1, *loaded.input_shape[1:]), 0)}
    results, best, best_gain = {}, raw, 1.0
    for name in names:
        target = work / f"{name}.onnx"
        facts = dict(loaded.remembered(("onnx-optimized", name, _digest(raw)), target,
                                       lambda: OPTIMIZERS[name](raw, target)))
        if measure:
            facts["speedup_batch1"] = round(speedup(raw, target, feed), 3)
            if facts["speedup_batch1"] > best_gain * 1.02:  # 2%: below the noise of a short interleaved timing
                best, best_gain = target, facts["speedup_batch1"]
        else:
            best = target
        results[name] = facts
    chosen = next((n for n in names if work / f"{n}.onnx" == best), None)
    info["optimize"] = {"asked": how, "tool": results[chosen]["tool"] if chosen else None, "candidates": results,
                        "gain": f"{best_gain:.2f}x at batch 1" if measure and chosen else
                        ("none measurable at batch 1; the exported graph is kept" if measure else None)}
    return best


def _digest(path: Path) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _input_name(path: Path) -> str:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    return next(v.name for v in graph.input if v.name not in initializers)


def _export_any(model, example, path: Path, options: OnnxOptions, outputs: list[str]) -> tuple[str, str | None]:
    """Run the requested exporter (or each of auto's in turn); return the one that worked."""
    errors = []
    weight_bytes = sum(p.numel() * 4 for p in model.parameters())
    for exporter in options.exporters(weight_bytes):
        try:
            _torch_export(model, example, path, options, outputs, exporter)
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


def _quiet_torch_logs():
    """torch.export logs whole stack traces for failures we report in one line ourselves."""
    return quiet_loggers("torch", "onnxscript", "onnx_ir", level=logging.CRITICAL)


def _torch_export(model, example, path: Path, options: OnnxOptions, outputs: list[str], exporter: str) -> None:
    import torch

    from vitexport.models.tracing import export_mode

    names = dict(input_names=[options.input_name], output_names=outputs)
    try:
        with torch.no_grad(), export_mode(), warnings.catch_warnings(), _quiet_torch_logs():
            warnings.simplefilter("ignore")  # tracer chatter; real problems raise or fail parity
            if exporter == "legacy":
                axes = {name: {0: "batch"} for name in (options.input_name, *outputs)}
                torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=options.opset,
                                  dynamic_axes=axes if options.dynamic_batch else None, do_constant_folding=True,
                                  **names)
            else:
                shapes = {"x": {0: torch.export.Dim("batch", min=1, max=4096)}} if options.dynamic_batch else None
                program = torch.onnx.export(model, (example,), dynamo=True, opset_version=options.opset,
                                            dynamic_shapes=_name_first_arg(model, shapes), optimize=False,
                                            verbose=False, **names)
                exported = list(program.model.graph.initializers.values())  # before folding replaces some
                program.optimize()
                program.save(str(path), external_data=True)
                _let_go_of_weights([*exported, *program.model.graph.initializers.values()])
                program.model.graph.initializers.clear()
    except Exception as e:
        raise ExportError(f"{exporter} exporter failed: {_root_cause(e)[:300]}") from None


def _let_go_of_weights(values) -> None:
    """Drop the exported program's references to the model's weights once it is saved. onnxscript's
    optimizer keeps the graphs it last rewrote in module globals, with the initializers it folded away:
    without this, a model let go before its check stays in memory beside the runtime's copy (ViT-H:
    2.5 GB more)."""
    for value in values:
        value.const_value = None


def _name_first_arg(model, shapes):
    """dynamic_shapes is keyed by the forward's parameter name, which user models choose freely."""
    if shapes is None:
        return None
    import inspect

    params = [p for p in inspect.signature(model.forward).parameters if p != "self"]
    return {params[0]: shapes["x"]} if params else None


def _embed_metadata(model, loaded, options: OnnxOptions) -> None:
    import json

    from vitexport.core import __version__

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


