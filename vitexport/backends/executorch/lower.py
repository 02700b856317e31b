"""PyTorch -> .pte: torch.export, int8 quantisation, the XNNPACK forms, lowering to the delegate,
and the facts the sidecar records (what was delegated, what was rewritten, how long it took)."""

from __future__ import annotations

import contextlib
import copy
import logging
import time
import warnings
from pathlib import Path

from vitexport.backends.executorch.libs import missing
from vitexport.backends.executorch.options import ExecuTorchOptions
from vitexport.backends.prehead import pre_head_of, with_pre_head
from vitexport.core import writer
from vitexport.core.errors import ExportError, VitexportError
from vitexport.core.usercode import raised

DELEGATE_IDS = {"xnnpack": "XnnpackBackend", "coreml": "CoreMLBackend", "portable": None}


def export_pte(loaded, options: ExecuTorchOptions, out_path: Path) -> dict:
    """Write the program at `out_path`; return the facts the sidecar records. The program's bytes are
    kept in the loaded model's memo: lowering ViT-B takes minutes, and optimize exports its pick again
    under the final name (the program holds no file name, so the same bytes serve)."""
    key = ("executorch-pte", repr(sorted(options.to_dict().items())))
    try:
        return loaded.remembered(key, out_path, lambda: _export_pte(loaded, options, out_path))
    finally:
        _forget_lowered_graphs()


def _forget_lowered_graphs() -> None:
    """ExecuTorch's backend utilities memoize node comparisons (`is_same_node`) in an unbounded cache
    whose keys hold the lowered graphs, and through them the model's weights, for the life of the
    process: the check's runtime would load beside a second copy (ViT-L: 1.2 GB). Emptied once the
    program is written."""
    from executorch.exir.backend import utils

    clear = getattr(getattr(utils, "is_same_node", None), "cache_clear", None)
    if clear is not None:
        clear()


def _export_pte(loaded, options: ExecuTorchOptions, out_path: Path) -> dict:
    import torch

    from vitexport.models.tracing import export_mode

    timings: dict[str, float] = {}
    half = options.precision == "fp16" and options.delegate != "coreml"  # Core ML casts inside its own program
    model = copy.deepcopy(loaded.model).half() if half else loaded.model  # the reference stays fp32
    # Trace at batch 2 when the batch is dynamic: a size-1 example would specialise the dimension.
    batch = 2 if options.dynamic_batch else loaded.input_shape[0]
    example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
    example = example.half() if half else example
    # Memory is planned for the bound: without one ExecuTorch plans for the example batch only.
    shapes = ({0: torch.export.Dim("batch", min=1, max=options.check_max_batch)},) if options.dynamic_batch else None
    info: dict = {"delegate": options.delegate, "input_dtype": "float16" if half else "float32",
                  "max_batch": options.check_max_batch if options.dynamic_batch else None, "trace_batch": batch}
    if head := pre_head_of(loaded, example):  # a constant output: the program also returns the head's input
        model = with_pre_head(model, head)
        info["pre_head"] = {"head": head, "output": 1}
    partitioners = _partitioners(options)  # first: imports the delegate, whose loggers _quiet then mutes
    with torch.no_grad(), export_mode(), _quiet():
        program = _stage("torch.export", timings, lambda: torch.export.export(model, (example,), dynamic_shapes=shapes))
        if options.precision == "int8":
            program, info["quant"] = _int8(program, loaded, options, example, shapes, timings)
        if options.delegate == "coreml":  # what Core ML would refuse (alias, rank > 5), rewritten as for `coreml`
            program, info["rewrites"] = _stage("rewrite", timings, lambda: _coreml_rewrites(program, example, shapes))
        program, info["decompositions"] = _forms(program, options, timings)
        with _temp_folder(options):
            edge = _stage("lower", timings, lambda: _lower(program, partitioners))
        info["delegation"] = _summary(edge, options)
        pte = _stage("to_executorch", timings, edge.to_executorch)
    writer.fill(out_path, pte.buffer)
    if options.delegate == "coreml":
        info["coreml"] = {"target": options.target, "compute_precision": options.precision,
                          "whole_program": _whole(info["delegation"])}
    info["timings_s"] = {k: round(v, 2) for k, v in timings.items() if not k.startswith("cpu:")}
    info["cpu_s"] = {k[4:]: round(v, 2) for k, v in timings.items() if k.startswith("cpu:")}
    return info


def _stage(name: str, timings: dict, fn):
    """Run one step, timing it (wall clock, and this process's CPU under `cpu:NAME`: on a shared
    machine the wall clock mostly measures the wait for a core), with a library failure named
    after the step."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        return fn()
    except VitexportError:
        raise
    except Exception as e:
        raise ExportError(f"ExecuTorch {name} failed: {raised(e)}") from None
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
        timings[f"cpu:{name}"] = timings.get(f"cpu:{name}", 0.0) + time.process_time() - c0


def _int8(program, loaded, options: ExecuTorchOptions, example, shapes, timings: dict):
    """The program quantised with XNNPACK's quantizer and exported again, and what the sidecar says of it."""
    import torch

    from vitexport.backends.executorch.quantize import STATIC_OPS, quantized_module

    calibration = None
    if options.quant == "static":
        from vitexport.verify.feeds import load_images

        calibration = load_images(options.calibration_images, loaded.preprocessing, loaded.input_shape)[0]
    quantized = _stage("quantize", timings, lambda: quantized_module(program, options.quant, example, calibration))
    program = _stage("torch.export", timings, lambda: torch.export.export(quantized, (example,), dynamic_shapes=shapes))
    facts = {"scheme": f"{options.quant} per-channel symmetric", "quantizer": "XNNPACKQuantizer (PT2E)",
             "ops": "linear, conv (dynamic)" if options.quant == "dynamic" else ", ".join(STATIC_OPS)}
    if calibration is not None:
        facts["calibration_images"] = int(len(calibration))
    return program, facts


def _coreml_rewrites(program, example, shapes):
    from vitexport.backends.coreml_common import rewrites
    from vitexport.core.errors import UnsupportedByRuntime

    try:
        return rewrites.rewritten(program, example, shapes)
    except rewrites.RankLimitError as e:
        raise UnsupportedByRuntime(f"Core ML's delegate cannot hold this model: {e}") from None


def _forms(program, options: ExecuTorchOptions, timings: dict):
    """The program with the XNNPACK forms where the options ask for them (and XNNPACK's GELU
    correction whenever it is the delegate), and {op: {count, as}}."""
    if options.delegate != "xnnpack" and not options.uses_xnnpack_forms:
        return program, {}
    from vitexport.backends.executorch.decompose import FORMS, xnnpack_forms

    program, used = _stage("decompose", timings,
                           lambda: xnnpack_forms(program, options.precision, speed=options.uses_xnnpack_forms))
    return program, {op: {"count": n, "as": FORMS[op]} for op, n in used.items()}


def _lower(program, partitioners: list):
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(program, partitioner=partitioners)


def _temp_folder(options: ExecuTorchOptions):
    """Core ML's delegate converts with coremltools, which leaves a package per partition in the
    temp folder until the process exits: lowered with a temp folder of its own."""
    if options.delegate != "coreml":
        return contextlib.nullcontext()
    from vitexport.backends.coreml_common.library import own_temp_folder

    return own_temp_folder()


def _partitioners(options: ExecuTorchOptions) -> list:
    if options.delegate == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
    if options.delegate == "coreml":
        from vitexport.backends.coreml_common.library import import_coremltools

        ct = import_coremltools()
        try:
            from executorch.backends.apple.coreml.compiler import CoreMLBackend
            from executorch.backends.apple.coreml.partition import CoreMLPartitioner
        except ImportError as e:
            raise missing(e) from None
        precision = ct.precision.FLOAT16 if options.precision == "fp16" else ct.precision.FLOAT32
        specs = CoreMLBackend.generate_compile_specs(compute_precision=precision,
                                                     minimum_deployment_target=getattr(ct.target, options.target))
        return [CoreMLPartitioner(compile_specs=specs)]
    return []  # portable: every op runs in ExecuTorch's own kernels


def _summary(edge, options: ExecuTorchOptions) -> dict:
    from vitexport.backends.executorch.delegation import summarize

    return summarize(edge.exported_program().graph_module, DELEGATE_IDS[options.delegate] or "none")


def _whole(delegation: dict) -> bool:
    """Whether one delegate call computes everything (so its embedded program stands for the .pte)."""
    return delegation["subgraphs"] == 1 and delegation["non_delegated_nodes"] == 0


@contextlib.contextmanager
def _quiet():
    """torch.export and the partitioners log stack traces and per-node notes we report in one line."""
    names = ("torch", "executorch", "coremltools", "torchao",
             "executorch.backends.apple.coreml.compiler.coreml_preprocess")  # sets its own level: named itself
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
