"""int8 IR with NNCF post-training quantization, calibrated on images.

`nncf.quantize` with ModelType.TRANSFORMER: int8 for the matrix products (the linear layers, the
patch embedding's convolution and attention's products), LayerNorm, Softmax and GELU left in float.
Two choices were measured (benchmarks/openvino.py, README): SmoothQuant is off, because on the few
images users calibrate on it tunes its scales to them and a ViT-B's outputs on other inputs then
drift (cosine 0.976 against PyTorch on random pixels, 0.999 without it, the same on the calibration
images); and the classifier head stays in float, as in vitexport's ONNX int8.

What is kept in float: the head, --keep-fp32 (op types, node names, globs over names, or module
paths), and the encoder blocks the accuracy search chose. Node names of a converted PyTorch module
carry the module path they came from (`__module.blocks.0.attn.qkv/aten::linear/MatMul`).
"""

from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING

from ...environment import quiet_loggers
from ...errors import BackendUnavailable, UsageError
from ...progress import current

if TYPE_CHECKING:
    import numpy as np

    from .options import OpenVinoOptions

SKIPPED_TYPES = ("Constant", "Parameter", "Result")
WEIGHT_OPS = ("MatMul", "Convolution")  # the ops whose weights int8 quantizes
_SCOPE = re.compile(r"^__module\.([^/]+)/")


def node_scope(name: str) -> str:
    """The module path a converted node came from ('' for the top level): `__module.blocks.0.attn/...`
    -> `blocks.0.attn`."""
    match = _SCOPE.match(name)
    return match.group(1) if match else ""


def in_scope(scope: str, path: str) -> bool:
    return bool(path) and (scope == path or scope.startswith(path + "."))


def ops_of(model) -> list:
    """The model's computing ops, in topological order (no constants, inputs or outputs)."""
    return [op for op in model.get_ordered_ops() if op.get_type_name() not in SKIPPED_TYPES]


def head_ops(model) -> list[str]:
    """The weight ops nearest the outputs (the classifier head and any projection after the last
    block): found by walking back from each output to the first matrix product."""
    found, seen = [], set()
    stack = [result.input_value(0).get_node() for result in model.get_results()]
    while stack:
        node = stack.pop()
        name = node.get_friendly_name()
        if name in seen or node.get_type_name() in ("Constant", "Parameter"):
            continue
        seen.add(name)
        if node.get_type_name() in WEIGHT_OPS:
            found.append(name)
            continue
        stack.extend(value.get_node() for value in node.input_values())
    return sorted(found)


def matching(entry: str, ops: list) -> list[str]:
    """Names of the ops an entry names: an op type, a node name, a glob over names, or a module path."""
    names = [op.get_friendly_name() for op in ops]
    if any(c in entry for c in "*?["):
        return [n for n in names if fnmatch.fnmatchcase(n, entry)]
    by_type = [op.get_friendly_name() for op in ops if op.get_type_name() == entry]
    if by_type:
        return by_type
    if entry in names:
        return [entry]
    return [n for n in names if in_scope(node_scope(n), entry)]


def kept_float(model, options: "OpenVinoOptions") -> dict[str, str]:
    """Every op kept in float -> why. Unknown --keep-fp32 entries are refused by name."""
    ops = ops_of(model)
    why: dict[str, str] = {}
    unknown = []
    for entry in options.keep_fp32:
        names = matching(entry, ops)
        if not names:
            unknown.append(entry)
        why.update({n: "--keep-fp32" for n in names if n not in why})
    if unknown:
        raise UsageError(f"--keep-fp32: no op type, node name or module of this model matches {', '.join(unknown)}")
    for path in options.search_keep:
        why.update({n: "accuracy search" for n in matching(path, ops) if n not in why})
    # Measured in ONNX int8 and here alike: the head in float costs no speed and keeps the logits closer.
    why.update({n: "classifier head" for n in head_ops(model) if n not in why})
    return why


def quantize_ir(model, options: "OpenVinoOptions", calibration: "np.ndarray", batch: int):
    """The int8 form of `model`, calibrated on `calibration` (N, C, H, W) in batches of `batch` (the
    model's own when it is static). Returns it and what the sidecar records."""
    try:
        import nncf
    except ImportError:
        raise BackendUnavailable("int8 IR needs NNCF: pip install 'vitexport[openvino]'") from None
    if calibration is None or len(calibration) == 0:
        raise UsageError("int8 calibration needs at least one image")
    why = kept_float(model, options)
    items = batches(calibration, batch)
    reporter = current()
    reporter.step(f"calibrating int8 with NNCF on {len(calibration)} images")
    params = nncf.AdvancedQuantizationParameters(
        smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=-1))  # -1: SmoothQuant off (see above)
    with quiet_nncf():
        quantized = nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,
                                  preset=nncf.QuantizationPreset.MIXED, subset_size=len(items), ignored_scope=nncf.IgnoredScope(names=sorted(why)),
                                  advanced_parameters=params)
    weights = [op.get_friendly_name() for op in ops_of(model) if op.get_type_name() in WEIGHT_OPS]
    shown = {name: reason for name, reason in why.items() if name in weights}  # the ops int8 would have taken
    fake_quantize = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ordered_ops())
    return quantized, {
        "tool": f"nncf {nncf.__version__}", "scheme": "ModelType.TRANSFORMER, preset MIXED, SmoothQuant off",
        "activations": f"int8 asymmetric per tensor, ranges from {len(calibration)} calibration images",
        "weights": "int8 symmetric, per output channel", "quantized_ops": len(weights) - len(shown),
        "fake_quantize_nodes": fake_quantize, "kept_float": shown}


def batches(images: "np.ndarray", batch: int) -> list:
    """Calibration inputs of the model's batch size; a short last batch is filled from the first images."""
    import numpy as np

    rows = np.ascontiguousarray(images, dtype=np.float32)
    out = []
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        if len(chunk) < batch:
            chunk = np.concatenate([chunk, np.resize(rows, (batch - len(chunk), *rows.shape[1:]))])
        out.append(chunk)
    return out


def quiet_nncf():
    """NNCF logs its progress bars and advice through its logger; vitexport reports progress itself."""
    return quiet_loggers("nncf")
