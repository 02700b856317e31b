"""int8 ONNX graphs, with ONNX Runtime's quantisation tools.

- For ONNX Runtime itself (`vitexport onnx --precision int8`): dynamic quantisation (int8 weights,
  activations quantised at run time) or static QDQ calibrated on images, with chosen nodes kept in
  float. What was chosen and why is measured in benchmarks/ and written in the manual (docs/backends/onnx.md): signed int8
  weights (unsigned ones have no fast kernel on x86), per-channel scales, the classifier head in float.
- For strongly typed TensorRT builders (TensorRT 11, TensorRT-RTX), which have no calibrators and
  build int8 from QuantizeLinear/DequantizeLinear pairs: a symmetric QDQ graph (`to_qdq_int8`).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from vitexport.core.environment import quiet_loggers
from vitexport.core.progress import current

if TYPE_CHECKING:
    from vitexport.backends.onnx.options import OnnxOptions

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
# The ops whose weights are quantised; attention's activation x activation MatMuls (no constant
# weight) stay float, as do LayerNorm, Softmax and GELU.
WEIGHT_OPS = ("MatMul", "Gemm", "Conv")


def matches(entries: tuple[str, ...], op_type: str, name: str) -> bool:
    """Whether a node is named by an entry: its op type, its exact name, or a glob over names."""
    for entry in entries:
        if entry in (op_type, name) or (any(c in entry for c in "*?[") and fnmatch.fnmatchcase(name, entry)):
            return True
    return False


def weight_nodes(graph) -> list:
    """Nodes that multiply by a stored weight (their second input is an initializer or a Constant)."""
    constants = {t.name for t in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    return [n for n in graph.node if n.op_type in WEIGHT_OPS and len(n.input) > 1 and n.input[1] in constants]


def head_nodes(graph) -> list[str]:
    """The weight nodes nearest the outputs: the classifier head (and any projection after the last
    block), found by walking back from each graph output until a weight node."""
    weights = {n.output[0]: n for n in weight_nodes(graph)}
    producers = {out: n for n in graph.node for out in n.output}
    found, seen = [], set()
    stack = [o.name for o in graph.output]
    while stack:
        tensor = stack.pop()
        if tensor in seen or tensor not in producers:
            continue
        seen.add(tensor)
        if tensor in weights:
            found.append(weights[tensor].name)
            continue
        stack.extend(producers[tensor].input)
    return sorted(found)


class ImageReader:
    """Calibration batches for ONNX Runtime's quantiser: one image at a time."""

    def __init__(self, input_name: str, images: np.ndarray):
        rows = np.ascontiguousarray(images, dtype=np.float32)
        self.batches = iter([{input_name: rows[i:i + 1]} for i in range(len(rows))])

    def get_next(self):
        batch = next(self.batches, None)
        if batch is not None:
            current().advance()
        return batch


def quantize_for_ort(src: Path, dst: Path, options: "OnnxOptions", input_name: str,
                     calibration: np.ndarray | None = None) -> dict:
    """Write the int8 form of `src` to `dst`; return what the sidecar records (mode, types, what was
    kept in float and why: the head, --keep-fp32, and the blocks the accuracy search chose)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    from vitexport.backends.onnx_common.localize import in_scope, node_scope

    graph = onnx.load(str(src), load_external_data=False).graph
    unknown = [e for e in options.keep_fp32 if not any(matches((e,), n.op_type, n.name) for n in graph.node)]
    if unknown:
        from vitexport.core.errors import UsageError

        raise UsageError(f"--keep-fp32: no node or op type of this graph matches {', '.join(unknown)}")
    weights = weight_nodes(graph)
    head = head_nodes(graph)
    why: dict[str, str] = {}  # node kept in float -> why
    for n in weights:
        if n.name in head:
            why[n.name] = "classifier head"  # measured: float here costs no speed and keeps the logits closer
        elif matches(options.keep_fp32, n.op_type, n.name):
            why[n.name] = "--keep-fp32"
        elif any(in_scope(node_scope(n), scope) for scope in options.search_keep):
            why[n.name] = "accuracy search"
    kept = sorted(why)
    reduce = not has_vnni()
    common = dict(op_types_to_quantize=list(WEIGHT_OPS), per_channel=options.per_channel, nodes_to_exclude=kept,
                  weight_type=QuantType.QInt8, use_external_data_format=_has_external_data(src),
                  reduce_range=reduce)
    if options.quant == "dynamic":
        with quiet_quantizer():
            quantize_dynamic(str(src), str(dst), **common)
        activations = "uint8, quantised at run time per tensor"
    else:
        method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                  "percentile": CalibrationMethod.Percentile}[options.calibration_method]
        # Only the weight ops: quantising LayerNorm inputs and residual Adds costs accuracy (an 8-bit
        # residual stream); attention's activation x activation MatMuls stay float for the same reason.
        weight_names = {n.name for n in weights}
        activation_matmuls = [n.name for n in graph.node if n.op_type == "MatMul" and n.name not in weight_names]
        common["nodes_to_exclude"] = kept + activation_matmuls
        current().step("calibrating int8", total=len(calibration))
        with quiet_quantizer():
            quantize_static(str(src), str(dst), ImageReader(input_name, calibration), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, calibrate_method=method, **common)
        activations = f"uint8, ranges from {options.calibration_method} calibration on {len(calibration)} images"
    return {"mode": options.quant, "activations": activations,
            "weights": "int8 symmetric, " + ("per channel" if options.per_channel else "per tensor")
            + (", 7-bit range (no VNNI here: 8-bit products can saturate)" if reduce else ""),
            "quantized_nodes": len(weights) - len(kept), "kept_float": why}


def has_vnni() -> bool:
    """Whether this x86 CPU multiplies int8 with VNNI (AVX-512 VNNI, AVX-VNNI, AMX). Without it, ONNX
    Runtime's uint8 x int8 products go through 16-bit pairwise sums that saturate on large weights
    (measured: the model zoo's int8 lost its check on an AVX2-only EPYC), so weights are quantised
    to 7 bits there, as ONNX Runtime advises. Other architectures are not affected."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return True
    try:
        with open("/proc/cpuinfo") as f:
            flags = {word for line in f if line.startswith("flags") for word in line.split(":", 1)[1].split()}
    except OSError:
        return True  # unknown: keep the full range
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


def quiet_quantizer():
    """ONNX Runtime's quantiser warns on the root logger to run its pre-processing; vitexport runs
    onnxslim instead (measured faster), so the advice is noise here."""
    return quiet_loggers("")


def _has_external_data(path: Path) -> bool:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def is_qdq(onnx_path: Path) -> bool:
    """Whether the ONNX already carries quantise/dequantise pairs (explicit quantisation)."""
    import onnx

    try:
        graph = onnx.load(str(onnx_path), load_external_data=False).graph
    except Exception as e:  # protobuf's DecodeError and friends
        from vitexport.core.errors import UsageError

        raise UsageError(f"{onnx_path} is not a readable ONNX file ({type(e).__name__})") from None
    return any(node.op_type in QDQ_OPS for node in graph.node)


def to_qdq_int8(onnx_path: Path, out: Path, input_name: str, calibration: np.ndarray,
                keep: Callable[[str, str], bool] | None = None) -> dict:
    """Write a QDQ-quantised copy of `onnx_path` calibrated on `calibration` (N, C, H, W) to `out`.

    Nodes for which `keep(op_type, name)` holds are left unquantised (LayerNorm and Softmax by default,
    for the same reason fp16 keeps them in fp32).
    """
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static


    if len(calibration) == 0:
        from vitexport.core.errors import UsageError

        raise UsageError("int8 calibration needs at least one input")
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    excluded = [n.name for n in graph.node if keep is not None and n.name and keep(n.op_type, n.name)]

    class Reader(ImageReader, CalibrationDataReader):
        pass

    current().step("calibrating int8 (QDQ)", total=len(calibration))

    # TensorRT takes symmetric int8 only (zero points of 0), and biases stay in float.
    quantize_static(str(onnx_path), str(out), Reader(input_name, calibration), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    nodes_to_exclude=excluded,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
    return {"calibration_inputs": int(len(calibration)), "excluded_nodes": len(excluded)}


def calibration_set(folder: str) -> dict:
    """What calibrated an int8 graph: the folder, its image count and one digest over their bytes."""
    import hashlib

    from vitexport.core.environment import sha256_file
    from vitexport.verify.feeds import IMAGE_SUFFIXES

    files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    digest = hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()
    return {"folder": str(Path(folder).resolve()), "images": len(files), "sha256": digest}
