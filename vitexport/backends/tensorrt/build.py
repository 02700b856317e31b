"""Build a TensorRT engine from an ONNX file and say what it is tied to."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from vitexport.backends.onnx_common.quantize import is_qdq, to_qdq_int8
from vitexport.backends.tensorrt import generations
from vitexport.backends.tensorrt.options import TensorRTOptions, validate
from vitexport.core.environment import gpu_facts, jetson_facts, sha256_file
from vitexport.core.writer import atomic_path, write_atomic
from vitexport.core.errors import BackendUnavailable, ExportError, UsageError

# Without explicit targets TensorRT-RTX builds engines portable across these (its documented default).
RTX_DEFAULT_TARGETS = ("SM86", "SM89", "SM120")
# GPUs TensorRT-RTX runs on at all (its support matrix: Turing, Ampere, Ada and Blackwell RTX, GB10).
RTX_RUNS_ON = ("7.5", "8.6", "8.9", "12.0", "12.1")


def build_engine(onnx_path: Path, options: TensorRTOptions, out_path: Path, *, input_name: str | None = None,
                 calibration: np.ndarray | None = None) -> dict[str, Any]:
    """Build `out_path` from `onnx_path`; return the facts its sidecar records.

    `calibration`: float32 inputs (N, C, H, W) for int8, unless the ONNX is already QDQ-quantised.
    The engine (and any typed ONNX made on the way) appears complete or not at all.
    """
    onnx_path, out_path = Path(onnx_path), Path(out_path)
    if not onnx_path.is_file():
        raise UsageError(f"no ONNX file at {onnx_path}")
    trt = generations.load(options.builder)
    prequantized = is_qdq(onnx_path)
    validate(options, trt, calibrated=prequantized or calibration is not None)
    facts = {**gpu_facts(), **jetson_facts()}
    if tuple(t.upper() for t in options.rtx_targets) == ("CURRENT",) and not facts["gpu"]:
        raise UsageError("--rtx-targets CURRENT builds for the GPU here, and none is visible; name the targets "
                         "instead (e.g. SM86,SM89)")
    made: list[Path] = []  # typed ONNX files written here; removed again if the build fails
    try:
        source, notes = _source(trt, options, onnx_path, out_path, input_name, calibration, prequantized, made)
        info = _build(trt, options, source, out_path, facts, calibration, prequantized)
    except BaseException:
        for path in made:
            path.unlink(missing_ok=True)
        raise
    return {
        "flavour": trt.flavour, "tensorrt_version": trt.version, "cuda": trt.cuda_major(), **facts,
        "target": _target(trt, facts, info["compute_targets"]), "strongly_typed": trt.strongly_typed,
        "precision": options.precision, "int8_source": notes.get("int8_source"),
        "fp32_layers": list(options.fp32_layers) if options.precision != "fp32" else [],
        "kept_fp32": notes.get("kept_fp32"), "profiles": [list(p) for p in options.profiles()],
        "onnx": onnx_path.name, "onnx_path": str(onnx_path.resolve()), "onnx_sha256": sha256_file(onnx_path),
        "built_from": source.name, "built_from_sha256": sha256_file(source) if source != onnx_path else None,
        **info, "engine_bytes": out_path.stat().st_size, "options": options.to_dict(),
    }


def _source(trt: generations.Trt, options: TensorRTOptions, onnx_path: Path, out_path: Path, input_name, calibration,
            prequantized: bool, made: list[Path]) -> tuple[Path, dict]:
    """The ONNX the builder parses: the given one, or for strongly typed builders its fp16 / QDQ form."""
    notes: dict[str, Any] = {}
    if options.precision == "fp16" and trt.strongly_typed:
        from vitexport.backends.onnx_common.fp16 import convert_file

        target = out_path.with_suffix(".fp16.onnx")
        with atomic_path(target) as tmp:
            notes["kept_fp32"] = convert_file(onnx_path, tmp, options.keeps_fp32)["kept_fp32"]
        made.append(target)
        return target, notes
    if options.precision != "int8":
        return onnx_path, notes
    if prequantized:
        notes["int8_source"] = "QDQ nodes of the given ONNX"
        return onnx_path, notes
    if calibration is None:
        raise UsageError("int8 needs calibration data: give --calibration-images DIR (or a QDQ-quantised ONNX)")
    if trt.has_calibrators:
        notes["int8_source"] = f"entropy calibrator on {len(calibration)} inputs"
        return onnx_path, notes
    target = out_path.with_suffix(".int8-qdq.onnx")
    name = input_name or _first_input(onnx_path)
    with atomic_path(target) as tmp:
        to_qdq_int8(onnx_path, tmp, name, calibration, options.keeps_fp32)
    made.append(target)
    notes["int8_source"] = f"QDQ ONNX calibrated on {len(calibration)} inputs"
    return target, notes


def _build(trt: generations.Trt, options: TensorRTOptions, source: Path, out_path: Path, facts: dict, calibration,
           prequantized: bool) -> dict[str, Any]:
    m = trt.module
    logger = m.Logger(m.Logger.ERROR)
    builder = m.Builder(logger)
    network = builder.create_network(generations.network_flags(trt, trt.strongly_typed))
    parser = m.OnnxParser(network, logger)
    if not parser.parse_from_file(str(source)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ExportError(f"the TensorRT ONNX parser rejected {source.name}: {errors[:300]}")
    config = builder.create_builder_config()
    generations.set_workspace(trt, config, options.workspace_mb << 20)
    if not options.tf32 and hasattr(m.BuilderFlag, "TF32"):
        config.clear_flag(m.BuilderFlag.TF32)  # on by default; it would put fp32 parity out of reach
    calib_cache = _precision(trt, config, network, options, calibration, prequantized, out_path)
    _profiles(builder, config, network, options, calibrating=calib_cache is not None)
    if options.optimization_level is not None:
        config.builder_optimization_level = options.optimization_level
    if options.dla_core is not None:
        config.default_device_type = m.DeviceType.DLA
        config.DLA_core = options.dla_core
        config.set_flag(m.BuilderFlag.GPU_FALLBACK)  # layers the DLA cannot run go to the GPU
    if options.version_compatible:
        config.set_flag(m.BuilderFlag.VERSION_COMPATIBLE)
    if options.hardware_compatibility:
        config.hardware_compatibility_level = getattr(m.HardwareCompatibilityLevel,
                                                      options.hardware_compatibility.upper())
    targets = generations.set_compute_targets(trt, config, options.rtx_targets) if trt.has_compute_targets else None
    if hasattr(m, "ProfilingVerbosity"):  # layer names, precisions and tactics for the layer report
        config.profiling_verbosity = m.ProfilingVerbosity.DETAILED
    cache_file = _timing_cache(trt, config, options, facts)
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None:
        raise ExportError(f"{trt.label} could not build an engine from {source.name} (see its messages above)")
    write_atomic(out_path, bytes(serialized))
    if cache_file is not None:
        write_atomic(cache_file, bytes(config.get_timing_cache().serialize()))
    io, io_source = _io(trt, logger, serialized, network, facts)
    return {"io": io, "io_source": io_source, "build_s": round(seconds, 3),
            "compute_targets": targets, "timing_cache": str(cache_file) if cache_file else None,
            "calibration_cache": str(calib_cache) if calib_cache else None,
            "dla_core": options.dla_core, "version_compatible": options.version_compatible,
            "hardware_compatibility": options.hardware_compatibility}


def _precision(trt: generations.Trt, config, network, options: TensorRTOptions, calibration, prequantized: bool,
               out_path: Path) -> Path | None:
    """Precision flags and per-layer fp32 constraints for weakly typed builders; strongly typed
    builders take the precision from the ONNX's types and need nothing here."""
    m = trt.module
    if trt.strongly_typed or options.precision == "fp32":
        return None
    cache = None
    if options.precision == "int8":
        config.set_flag(m.BuilderFlag.INT8)
        if not prequantized:  # implicit quantisation: ranges from the entropy calibrator
            cache = Path(options.calibration_cache) if options.calibration_cache else out_path.with_suffix(
                ".calib.cache")
            config.int8_calibrator = _calibrator(m, calibration, cache)
    else:
        config.set_flag(m.BuilderFlag.FP16)
    # Keep the numerically fragile layers in fp32 and make the builder obey it.
    kinds = {name: getattr(m.LayerType, kind, None) for name, kind in
             (("LayerNormalization", "NORMALIZATION"), ("Softmax", "SOFTMAX"))}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        by_type = any(layer.type == kind for name, kind in kinds.items() if kind is not None and name in
                      options.fp32_layers)
        if by_type or options.keeps_fp32("", layer.name):
            layer.precision = m.DataType.FLOAT
            for j in range(layer.num_outputs):
                layer.set_output_type(j, m.DataType.FLOAT)
    config.set_flag(m.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    return cache


def _calibrator(m, calibration, cache: Path):
    import torch

    if calibration is None:
        raise UsageError("int8 needs calibration data: give --calibration-images DIR")
    if not torch.cuda.is_available():
        raise BackendUnavailable("int8 calibration with this TensorRT runs on the GPU; none is visible here")
    from vitexport.backends.tensorrt.calibrator import make_calibrator

    return make_calibrator(m, calibration, cache)


def _profiles(builder, config, network, options: TensorRTOptions, calibrating: bool = False) -> None:
    """One optimisation profile per batch range, over every input whose batch is dynamic (and, for
    the entropy calibrator, which feeds one input at a time, a batch-1 calibration profile)."""
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    dynamic = [t for t in inputs if len(t.shape) and t.shape[0] == -1]
    for t in inputs:
        if any(d == -1 for d in list(t.shape)[1:]):
            raise UsageError(f"{t.name} has dynamic dimensions besides the batch {list(t.shape)}; export the "
                             "ONNX with a fixed image size")
    if not dynamic:
        if options.dynamic:
            raise UsageError("the ONNX has a fixed batch; export it with --dynamic-batch to build batch profiles")
        return
    for low, opt, high in options.profiles():
        profile = builder.create_optimization_profile()
        for t in dynamic:
            rest = tuple(t.shape)[1:]
            profile.set_shape(t.name, (low, *rest), (opt, *rest), (high, *rest))
        config.add_optimization_profile(profile)
    if calibrating:
        profile = builder.create_optimization_profile()
        for t in dynamic:
            one = (1, *tuple(t.shape)[1:])
            profile.set_shape(t.name, one, one, one)
        config.set_calibration_profile(profile)


def _timing_cache(trt: generations.Trt, config, options: TensorRTOptions, facts: dict) -> Path | None:
    if not options.timing_cache or not hasattr(config, "create_timing_cache"):
        return None
    if not facts.get("gpu"):
        return None  # an ahead-of-time build times nothing; loading a cache without a GPU only errors
    path = timing_cache_path(options.timing_cache, trt, facts)
    cache = config.create_timing_cache(path.read_bytes() if path.exists() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    return path


def timing_cache_path(folder: str | Path, trt: generations.Trt, facts: dict) -> Path:
    """Timing caches are only valid for one GPU architecture and TensorRT version: key the file by both."""
    arch = "sm" + facts["compute_capability"].replace(".", "") if facts.get("compute_capability") else "aot"
    return Path(folder) / f"timing-{trt.flavour}-{trt.version}-{arch}.cache"


def _io(trt: generations.Trt, logger, serialized, network, facts: dict) -> tuple[list[dict], str]:
    """The I/O read back from the deserialised engine where this machine can load it (a GPU is
    visible); otherwise from the network definition the engine was built from."""
    runs_here = facts.get("gpu") and (trt.flavour != "rtx" or facts.get("compute_capability") in RTX_RUNS_ON)
    if runs_here:
        try:
            engine = trt.module.Runtime(logger).deserialize_cuda_engine(bytes(serialized))
        except Exception:  # pybind raises various types; the network below still answers
            engine = None
        if engine is not None:
            return generations.io_tensors(engine), "engine"
    return generations.io_tensors(network), "network"


def _target(trt: generations.Trt, facts: dict, targets: list[str] | None) -> str:
    if trt.flavour == "rtx":
        chosen = targets or list(RTX_DEFAULT_TARGETS)
        if chosen == ["CURRENT"]:
            return f"{facts['gpu']} (compute capability {facts['compute_capability']})" if facts.get("gpu") \
                else "the GPU present at build time"
        return "RTX GPUs of " + ", ".join(chosen) + (" (portable default)" if not targets else "")
    if facts.get("gpu"):
        return f"{facts['gpu']} (compute capability {facts['compute_capability']})"
    return "the GPU present at build time"


def _first_input(onnx_path: Path) -> str:
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    return next(v.name for v in graph.input if v.name not in initializers)
