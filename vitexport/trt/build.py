"""Build a TensorRT engine from a verified ONNX file."""

from __future__ import annotations

import hashlib
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ExportError, UsageError
from . import api
from .options import TensorRTOptions, validate


def gpu_facts() -> dict[str, Any]:
    """The GPU the engine is built for, when torch can see one; None fields on a CPU-only build."""
    facts: dict[str, Any] = {"gpu": None, "compute_capability": None, "cuda": None}
    try:
        import torch

        facts["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            facts["gpu"] = torch.cuda.get_device_name(0)
            facts["compute_capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
    except ImportError:
        pass
    try:
        facts["l4t"] = Path("/etc/nv_tegra_release").read_text().splitlines()[0].strip()
    except OSError:
        facts["l4t"] = None
    return facts


def to_fp16(onnx_path: Path, out: Path, keep_fp32: tuple[str, ...]) -> Path:
    """fp16 weights and compute with I/O kept fp32 and `keep_fp32` op types left in fp32: what a
    strongly typed TensorRT (11, RTX) builds from, since it has no --fp16 flag to do it."""
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(onnx_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one warning per weight below fp16's smallest normal
        converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=list(keep_fp32))
    onnx.save(harmonise_types(converted, set(keep_fp32)), str(out))
    return out


def harmonise_types(model, keep_fp32: set[str]):
    """A strongly typed builder rejects ops mixing fp16 and fp32 inputs, which the converter leaves
    where a value is computed at run time (an attention scale from Shape -> Cast -> Sqrt, say):
    cast the fp32 side to fp16 in front of such ops."""
    import onnx
    from onnx import TensorProto, helper

    # The converter retypes values to fp16 but leaves Cast(to=FLOAT) nodes that produce them.
    declared = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    for node in model.graph.node:
        if node.op_type == "Cast" and declared.get(node.output[0]) == TensorProto.FLOAT16:
            for attr in node.attribute:
                if attr.name == "to" and attr.i == TensorProto.FLOAT:
                    attr.i = TensorProto.FLOAT16
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(graph.value_info) + list(graph.input)
             + list(graph.output)}
    types.update({t.name: t.data_type for t in graph.initializer})
    nodes = []
    for node in graph.node:
        kinds = [types.get(name) for name in node.input if name]
        if node.op_type not in keep_fp32 and node.op_type != "Cast" and TensorProto.FLOAT16 in kinds \
                and TensorProto.FLOAT in kinds:
            for i, name in enumerate(node.input):
                if name and types.get(name) == TensorProto.FLOAT:
                    cast_out = f"{name}__fp16_for_{node.name or node.output[0]}"
                    nodes.append(helper.make_node("Cast", [name], [cast_out], to=TensorProto.FLOAT16,
                                                  name=f"{cast_out}_cast"))
                    node.input[i] = cast_out
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return inferred


def to_qdq_int8(onnx_path: Path, out: Path, input_name: str, calibration: np.ndarray) -> Path:
    """A QDQ-quantised ONNX, calibrated on the given inputs (for builders without calibrators)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{input_name: calibration[i:i + 1]} for i in range(len(calibration))])

        def get_next(self):
            return next(self.batches, None)

    # TensorRT takes symmetric int8 only (zero points of 0), and biases stay in float.
    quantize_static(str(onnx_path), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
    return out


def timing_cache_path(folder: str, trt: api.Trt, facts: dict) -> Path:
    """Timing caches are only valid for one GPU architecture and TensorRT version: key the file by both."""
    arch = (facts.get("compute_capability") or "aot").replace(".", "")
    return Path(folder) / f"timing-{trt.flavour}-{trt.version}-sm{arch}.cache"


def build_engine(onnx_path: Path, options: TensorRTOptions, out_path: Path, input_name: str,
                 calibration: np.ndarray | None = None) -> dict[str, Any]:
    trt = api.load(options.builder)
    validate(options, trt.has_dla)
    m = trt.module
    facts = gpu_facts()
    strongly_typed = not trt.precision_flags
    source = Path(onnx_path)
    if strongly_typed and options.precision == "fp16":
        source = to_fp16(source, out_path.with_suffix(".fp16.onnx"), options.fp32_layers)
    elif strongly_typed and options.precision == "int8":
        if calibration is None:
            raise UsageError("int8 needs calibration inputs (--calibration-images)")
        source = to_qdq_int8(source, out_path.with_suffix(".int8-qdq.onnx"), input_name, calibration)

    logger = m.Logger(m.Logger.ERROR)
    builder = m.Builder(logger)
    network = builder.create_network(api.network_flags(trt, strongly_typed))
    parser = m.OnnxParser(network, logger)
    if not parser.parse_from_file(str(source)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ExportError(f"the TensorRT ONNX parser rejected {source.name}: {errors[:300]}")
    config = builder.create_builder_config()
    api.set_workspace(trt, config, options.workspace_mb << 20)
    _precision(trt, config, network, options, strongly_typed, calibration, input_name, out_path)
    _profiles(builder, config, network, options, input_name)
    if options.optimization_level is not None:
        config.builder_optimization_level = options.optimization_level
    if options.dla_core is not None:
        config.default_device_type = m.DeviceType.DLA
        config.DLA_core = options.dla_core
        config.set_flag(m.BuilderFlag.GPU_FALLBACK)
    if options.version_compatible:
        config.set_flag(m.BuilderFlag.VERSION_COMPATIBLE)
    if options.hardware_compatibility and hasattr(m, "HardwareCompatibilityLevel"):
        config.hardware_compatibility_level = getattr(m.HardwareCompatibilityLevel, options.hardware_compatibility.upper())
    cache_file = None
    if options.timing_cache and hasattr(config, "create_timing_cache"):
        cache_file = timing_cache_path(options.timing_cache, trt, facts)
        cache = config.create_timing_cache(cache_file.read_bytes() if cache_file.exists() else b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if serialized is None:
        raise ExportError("TensorRT could not build an engine (see the messages above)")
    out_path.write_bytes(bytes(serialized))
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_bytes(bytes(config.get_timing_cache().serialize()))
    return {
        "flavour": trt.flavour, "tensorrt_version": trt.version, "strongly_typed": strongly_typed,
        **facts, "target": facts["gpu"] or "ahead-of-time build (no GPU here)",
        "precision": options.precision, "fp32_layers": list(options.fp32_layers) if options.precision == "fp16" else [],
        "profiles": [list(p) for p in options.profiles()], "onnx": Path(onnx_path).name,
        "onnx_sha256": _sha256(Path(onnx_path)), "built_from": source.name, "io": api.io_tensors(network),
        "build_s": seconds, "engine_bytes": out_path.stat().st_size, "options": options.to_dict(),
        "timing_cache": str(cache_file) if cache_file else None,
    }


def _precision(trt, config, network, options, strongly_typed, calibration, input_name, out_path) -> None:
    m = trt.module
    if strongly_typed or options.precision == "fp32":
        return  # strongly typed: the ONNX's own types decide
    if options.precision == "fp16":
        config.set_flag(m.BuilderFlag.FP16)
    else:
        config.set_flag(m.BuilderFlag.INT8)
        if calibration is None:
            raise UsageError("int8 needs calibration inputs (--calibration-images)")
        from .calibrator import make_calibrator

        config.int8_calibrator = make_calibrator(m, calibration, out_path.with_suffix(".calib.cache"))
    # Keep the numerically fragile layers in fp32 and make TensorRT obey it.
    keep = {"LayerNormalization": "NORMALIZATION", "Softmax": "SOFTMAX"}
    kinds = {getattr(m.LayerType, keep[name]) for name in options.fp32_layers if name in keep}
    names = [n.lower() for n in options.fp32_layers]
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type in kinds or any(n in layer.name.lower() for n in names):
            layer.precision = m.DataType.FLOAT
            for j in range(layer.num_outputs):
                layer.set_output_type(j, m.DataType.FLOAT)
    config.set_flag(m.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)


def _profiles(builder, config, network, options: TensorRTOptions, input_name: str) -> None:
    tensor = next((network.get_input(i) for i in range(network.num_inputs) if network.get_input(i).name == input_name),
                  network.get_input(0))
    shape = list(tensor.shape)
    if shape[0] != -1:
        if options.dynamic:
            raise UsageError("the ONNX has a fixed batch; export it with --dynamic-batch to build batch profiles")
        return
    for low, opt, high in options.profiles():
        profile = builder.create_optimization_profile()
        profile.set_shape(tensor.name, (low, *shape[1:]), (opt, *shape[1:]), (high, *shape[1:]))
        config.add_optimization_profile(profile)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
