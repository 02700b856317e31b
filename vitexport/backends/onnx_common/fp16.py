"""fp32 ONNX -> fp16 ONNX with chosen nodes kept in fp32: what a strongly typed TensorRT builds from.

TensorRT 11 and TensorRT-RTX have no --fp16 flag: a network computes in the types its ONNX declares.
So an fp16 build starts from an ONNX whose weights and activations are fp16, while graph inputs and
outputs stay fp32 (the caller's contract does not change) and the numerically fragile nodes
(LayerNorm, Softmax) compute in fp32 behind Casts.

Every float value gets one home type: fp32 for graph inputs, outputs of kept nodes and constants
only kept nodes read; fp16 for everything else. A consumer that needs the other type reads it through
one shared Cast, so no node ever mixes fp16 and fp32 inputs (which a strongly typed builder rejects).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from vitexport.core.errors import ExportError, explained

FP16_MAX = 65504.0
# Inputs that the ONNX spec types as fp32 whatever the data type (Resize scales, Upsample scales).
ALWAYS_FP32_INPUTS = {("Resize", 2), ("Upsample", 1)}


def convert_file(src: Path, dst: Path, keep: Callable[[str, str], bool]) -> dict:
    """Write the fp16 form of `src` to `dst`; `keep(op_type, node_name)` says which nodes stay fp32."""
    import onnx

    model = onnx.load(str(src))
    converted, summary = convert(model, keep)
    onnx.save(converted, str(dst))
    return summary


def convert(model, keep: Callable[[str, str], bool]):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
    for node in model.graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ExportError(f"fp16 conversion does not handle control flow ({node.op_type} {node.name})")
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.value_info, *graph.input, *graph.output)}
    types.update({t.name: t.data_type for t in graph.initializer})
    for node in graph.node:  # constants whose type inference left out
        if node.op_type == "Constant" and node.output[0] not in types:
            types[node.output[0]] = _constant_type(node)
    is_float = {name for name, t in types.items() if t == FLOAT}

    kept = [keep(n.op_type, n.name) and n.op_type != "Cast" for n in graph.node]
    graph_inputs = {v.name for v in graph.input}
    graph_outputs = {v.name for v in graph.output}
    initializers = {t.name for t in graph.initializer}
    constants = initializers | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    # The exporter shares equal weights through Identity nodes (LayerNorm's ones and zeros, say).
    shared = {n.output[0] for n in graph.node if n.op_type == "Identity" and n.input[0] in constants}

    def fp32_readers(fp32_identities: set[str]) -> dict[str, list[bool]]:
        """value -> for each of its consumers, whether that consumer reads it in fp32."""
        out: dict[str, list[bool]] = {}
        for node, k in zip(graph.node, kept):
            through = node.op_type == "Identity" and node.output[0] in fp32_identities
            for i, name in enumerate(node.input):
                if name:
                    out.setdefault(name, []).append(k or through or (node.op_type, i) in ALWAYS_FP32_INPUTS)
        return out

    def fp32_only(readers: dict[str, list[bool]], name: str) -> bool:
        return bool(readers.get(name)) and all(readers[name])

    first = fp32_readers(set())
    fp32_identities = {name for name in shared if fp32_only(first, name)}
    consumers = fp32_readers(fp32_identities)  # a weight shared only with kept nodes stays fp32 all the way
    home: dict[str, int] = {}
    for name in is_float:
        if name in graph_inputs or ((name in constants or name in shared) and fp32_only(consumers, name)):
            home[name] = FLOAT
        else:
            home[name] = HALF
    for node, k in zip(graph.node, kept):
        if k:
            for out in node.output:
                if out in is_float:
                    home[out] = FLOAT

    # A graph output keeps its name and fp32 type: an fp16 producer writes `<name>__fp16` instead.
    renamed = {name: f"{name}__fp16" for name in graph_outputs if home.get(name) == HALF}

    nodes, casts = [], {}
    kept_names = [n.name or n.op_type for n, k in zip(graph.node, kept) if k]

    def read(name: str, want: int) -> str:
        """The name under which `name` is available in type `want`, adding a Cast the first time."""
        if name not in home or home[name] == want:
            return renamed.get(name, name)
        key = (name, want)
        if key not in casts:
            casts[key] = f"{name}__as_{'fp32' if want == FLOAT else 'fp16'}"
            nodes.append(helper.make_node("Cast", [renamed.get(name, name)], [casts[key]], to=want,
                                          name=f"{casts[key]}_cast"))
        return casts[key]

    for node, k in zip(graph.node, kept):
        for i, name in enumerate(node.input):
            if name:
                through = node.op_type == "Identity" and node.output[0] in fp32_identities
                want = FLOAT if k or through or (node.op_type, i) in ALWAYS_FP32_INPUTS else HALF
                node.input[i] = read(name, want)
        stays_fp32 = (node.op_type == "Identity" and node.output[0] in fp32_identities) or \
            (node.op_type == "Constant" and home.get(node.output[0]) == FLOAT)  # read by kept nodes only
        if not k and not stays_fp32:
            _retype_attributes(node, FLOAT, HALF, numpy_helper, helper)
            if node.op_type == "ConstantOfShape" and node.output[0] in is_float \
                    and not any(a.name == "value" for a in node.attribute):
                # Its default value is an fp32 zero: say fp16 explicitly.
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(_clip([0.0]))))
        produced = list(node.output)
        for i, name in enumerate(produced):
            if name in renamed:
                node.output[i] = renamed[name]
        nodes.append(node)
        for name in produced:
            if name in renamed:
                nodes.append(helper.make_node("Cast", [renamed[name]], [name], to=FLOAT, name=f"{name}__to_fp32"))

    for tensor in graph.initializer:
        if home.get(tensor.name) == HALF:
            tensor.CopyFrom(_to_half(tensor, numpy_helper))
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # stale types; re-inferred below
    try:
        result = onnx.shape_inference.infer_shapes(inferred, strict_mode=True)
        onnx.checker.check_model(result)
    except Exception as e:  # onnx raises several types here; all mean the conversion is inconsistent
        raise ExportError(f"fp16 conversion produced an inconsistent graph: {explained(e)}") from None
    return result, {"kept_fp32": kept_names, "casts_added": len(casts) + len(renamed)}


def _constant_type(node) -> int:
    from onnx import TensorProto

    for attr in node.attribute:
        if attr.name == "value":
            return attr.t.data_type
        if attr.name in ("value_float", "value_floats"):
            return TensorProto.FLOAT
    return TensorProto.UNDEFINED


def _retype_attributes(node, FLOAT: int, HALF: int, numpy_helper, helper) -> None:
    """Constants, fills and casts that produce fp32 produce fp16 instead."""
    import numpy as np

    for attr in list(node.attribute):
        if attr.name in ("to", "dtype") and attr.type == attr.INT and attr.i == FLOAT:
            attr.i = HALF
        elif attr.type == attr.TENSOR and attr.t.data_type == FLOAT:
            attr.t.CopyFrom(_to_half(attr.t, numpy_helper))
        elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
            values = np.asarray(attr.f if attr.name == "value_float" else list(attr.floats), dtype=np.float32)
            node.attribute.remove(attr)
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(_clip(values))))


def _clip(values):
    import numpy as np

    # Values beyond fp16's range (masks of -3.4e38, say) become its largest finite value, not inf.
    return np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16)


def _to_half(tensor, numpy_helper):
    return numpy_helper.from_array(_clip(numpy_helper.to_array(tensor)), tensor.name)
