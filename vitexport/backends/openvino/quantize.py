"""int8 IR with NNCF post-training quantization, calibrated on images.

`nncf.quantize` with ModelType.TRANSFORMER (preset MIXED: symmetric int8 weights per channel,
asymmetric int8 activations per tensor) takes the linear layers; LayerNorm, Softmax and GELU stay in
float. Measured choices (docs/backends/openvino.md; `benchmarks/openvino_speed.py`):

- SmoothQuant is off. On the handful of images users calibrate on it tunes its scales to them: a
  ViT-B calibrated on samples/images then reached cosine 0.976 to PyTorch on other inputs (0.999
  without it, and the same on the calibration images).
- The patch embedding, the classifier head and attention's activation x activation products stay in
  float, as in vitexport's ONNX int8. On the trained digits sample's held-out images, the worst
  image's cosine to PyTorch is 0.998 so; with the patch embedding in int8 it drops to 0.970 (it
  reads raw pixels, where int8 loses most), with attention's products in int8 to 0.990. They are
  about 5% of a ViT-B's multiply-adds: its latency did not change measurably.

Also kept in float: --keep-fp32 (op types, node names, globs over names, or module paths) and the
encoder blocks the accuracy search chose. A converted PyTorch module's node names carry the module
path they came from (`__module.blocks.0.attn.qkv/aten::linear/MatMul`).

The last int8 IR of a loaded model is kept in its memo, keyed by everything that determines it (the
conversion, the calibration images, the batch, the keep-lists): IR that differ only in the precision
their float part is compiled in (`vitexport optimize`'s candidates) are calibrated once.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import io
import re
from typing import TYPE_CHECKING

from vitexport.core.environment import quiet_loggers, sha256_array
from vitexport.core.errors import BackendUnavailable, UsageError
from vitexport.core.progress import current

if TYPE_CHECKING:
    import numpy as np

    from vitexport.backends.openvino.options import OpenVinoOptions

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


def constant_valued(node, memo: dict) -> bool:
    """Whether a node's value is fixed at conversion (a weight, or ops on weights only)."""
    name = node.get_friendly_name()
    if name not in memo:
        kind = node.get_type_name()
        memo[name] = kind == "Constant" or (kind != "Parameter" and all(
            constant_valued(v.get_node(), memo) for v in node.input_values()))
    return memo[name]


def weight_ops(model) -> list:
    """The ops that multiply by a stored weight: the linear layers and the patch embedding."""
    memo: dict = {}
    return [op for op in ops_of(model) if op.get_type_name() in WEIGHT_OPS
            and any(constant_valued(v.get_node(), memo) for v in op.input_values())]


def activation_products(model) -> list[str]:
    """Attention's products of two activations (scores and their weighting of the values): fused
    ScaledDotProductAttention ops, or MatMuls without a weight."""
    weights = {op.get_friendly_name() for op in weight_ops(model)}
    return [op.get_friendly_name() for op in ops_of(model) if op.get_type_name() == "ScaledDotProductAttention"
            or (op.get_type_name() == "MatMul" and op.get_friendly_name() not in weights)]


def nearest_weight_ops(model, start: list, forward: bool) -> list[str]:
    """The first weight ops reached from `start` nodes, walking towards the outputs or the inputs."""
    weights = {op.get_friendly_name() for op in weight_ops(model)}
    found, seen, stack = [], set(), list(start)
    while stack:
        node = stack.pop()
        name = node.get_friendly_name()
        if name in seen or node.get_type_name() == "Constant":
            continue
        seen.add(name)
        if name in weights:
            found.append(name)
            continue
        if forward:
            stack.extend(t.get_node() for out in node.outputs() for t in out.get_target_inputs())
        else:
            stack.extend(v.get_node() for v in node.input_values())
    return sorted(found)


def head_ops(model) -> list[str]:
    """The weight ops nearest the outputs: the classifier head (and any projection after the last block)."""
    return nearest_weight_ops(model, [r.input_value(0).get_node() for r in model.get_results()], forward=False)


def input_ops(model) -> list[str]:
    """The weight ops nearest the input: the patch embedding."""
    return nearest_weight_ops(model, list(model.get_parameters()), forward=True)


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
    # Float by default, each measured (module docstring): no speed lost, accuracy kept.
    defaults = (("patch embedding", input_ops(model)), ("classifier head", head_ops(model)),
                ("attention product", activation_products(model)))
    for reason, names in defaults:
        why.update({n: reason for n in names if n not in why})
    return why


def quantize_ir(model, options: "OpenVinoOptions", calibration: "np.ndarray", batch: int, memo: dict,
                converted) -> tuple:
    """The int8 form of `model`, calibrated on `calibration` (N, C, H, W) in batches of `batch` (the
    model's own when it is static). Returns it and what the sidecar records. `memo`: the loaded model's,
    where the last int8 model is kept; `converted`: the key `model` was converted under in it."""
    try:
        with quiet_nncf():
            import nncf
    except ImportError:
        raise BackendUnavailable("int8 IR needs NNCF: pip install 'vitexport[openvino]'") from None
    if calibration is None or len(calibration) == 0:
        raise UsageError("int8 calibration needs at least one image")
    why = kept_float(model, options)
    reporter = current()
    key = (INT8, converted, batch, tuple(options.keep_fp32), tuple(options.search_keep), sha256_array(calibration))
    if key in memo:
        reporter.note("int8 calibration reused: the same model, images and keep-lists as the last int8 IR")
        quantized, facts = memo[key]
        return quantized.clone(), copy.deepcopy(facts)
    items = batches(calibration, batch)
    reporter.step(f"calibrating int8 with NNCF on {len(calibration)} images")
    params = nncf.AdvancedQuantizationParameters(
        smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=-1))  # -1: SmoothQuant off (see above)
    with quiet_nncf():
        quantized = nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,
                                  preset=nncf.QuantizationPreset.MIXED, subset_size=len(items),
                                  ignored_scope=nncf.IgnoredScope(names=sorted(why)), advanced_parameters=params)
    weights = [op.get_friendly_name() for op in weight_ops(model)]
    products = activation_products(model)
    shown = {name: reason for name, reason in why.items() if name in weights or name in products}
    fake_quantize = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ordered_ops())
    facts = {
        "mode": "static", "tool": f"nncf {nncf.__version__}",
        "scheme": "ModelType.TRANSFORMER, preset MIXED, SmoothQuant off",
        "activations": f"int8 asymmetric per tensor, ranges from {len(calibration)} calibration images",
        "weights": "int8 symmetric, per output channel", "quantized_nodes": sum(w not in why for w in weights),
        "fake_quantize_nodes": fake_quantize, "kept_float": shown}
    for old in [k for k in memo if isinstance(k, tuple) and k[:1] == (INT8,)]:
        del memo[old]  # one kept: a ViT-B's is hundreds of megabytes
    memo[key] = (quantized.clone(), copy.deepcopy(facts))
    return quantized, facts


INT8 = "openvino-int8"  # the memo keys of int8 models begin with it


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


@contextlib.contextmanager
def quiet_nncf():
    """NNCF logs advice through its logger and draws progress bars on stdout; vitexport reports
    progress itself (and `--json` keeps stdout for its one object)."""
    # NNCF imports torch's cpp_extension, which warns that there is no CUDA.
    with quiet_loggers("nncf", "torch.utils.cpp_extension"), contextlib.redirect_stdout(io.StringIO()):
        yield
