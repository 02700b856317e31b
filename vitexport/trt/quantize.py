"""int8 for strongly typed builders: a QDQ-quantised ONNX calibrated on real inputs.

TensorRT 11 and TensorRT-RTX have no calibrators; they build int8 from QuantizeLinear/DequantizeLinear
pairs in the ONNX itself. ONNX Runtime's static quantiser writes exactly that from calibration arrays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def is_qdq(onnx_path: Path) -> bool:
    """Whether the ONNX already carries quantise/dequantise pairs (explicit quantisation)."""
    import onnx

    try:
        graph = onnx.load(str(onnx_path), load_external_data=False).graph
    except Exception as e:  # protobuf's DecodeError and friends
        from ..errors import UsageError

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
        from ..errors import UsageError

        raise UsageError("int8 calibration needs at least one input")
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    excluded = [n.name for n in graph.node if keep is not None and n.name and keep(n.op_type, n.name)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rows = np.ascontiguousarray(calibration, dtype=np.float32)
            self.batches = iter([{input_name: rows[i:i + 1]} for i in range(len(rows))])

        def get_next(self):
            return next(self.batches, None)

    # TensorRT takes symmetric int8 only (zero points of 0), and biases stay in float.
    quantize_static(str(onnx_path), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    nodes_to_exclude=excluded,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
    return {"calibration_inputs": int(len(calibration)), "excluded_nodes": len(excluded)}
