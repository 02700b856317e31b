"""Static checks of an exported ONNX graph for the traps that parity on one input can miss."""

from __future__ import annotations

from pathlib import Path

from vitexport.verify.parity import Finding

RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
# A LayerNorm the exporter spelled out in primitives (opset < 17, or a hand-written norm):
# in fp16 its Pow/ReduceMean overflow after attention unless kept in fp32.
DECOMPOSED_LAYERNORM = ("ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div")


def lint_onnx(path: Path, dynamic_batch: bool, target_precision: str = "fp32") -> list[Finding]:
    """`target_precision`: what the graph will compute in (its own precision, or the engine's built from it)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    try:
        model = onnx.shape_inference.infer_shapes(without_weights(model))
    except Exception:  # shape inference is best effort; the rules below degrade gracefully
        pass
    findings = []
    if dynamic_batch:
        findings += baked_batch(model)
    findings += random_ops(model)
    findings += decomposed_layernorm(model, target_precision)
    return findings


def without_weights(model):
    """A copy of the graph with its weight matrices' bytes left out (each keeps its type and shape,
    marked as external data), for shape inference: it serialises the whole model twice, which for
    ViT-B's 346 MB of weights takes seconds, and shapes do not depend on weights. Vectors and scalars
    (the shape constants a Reshape reads) stay."""
    import onnx

    light = onnx.ModelProto()
    light.CopyFrom(model)  # a memory copy, far cheaper than serialising
    for tensor in light.graph.initializer:
        if len(tensor.dims) >= 2 and tensor.raw_data:
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            entry = tensor.external_data.add()
            entry.key, entry.value = "location", "left-out"
    return light


def _constants(model) -> dict:
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if len(t.dims) <= 1}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def batch_symbols(model) -> set[str]:
    """The names the graph's inputs give their dynamic batch dimension ("batch", "s0", ...)."""
    initializers = {t.name for t in model.graph.initializer}
    return {v.type.tensor_type.shape.dim[0].dim_param for v in model.graph.input
            if v.name not in initializers and v.type.tensor_type.shape.dim
            and v.type.tensor_type.shape.dim[0].dim_param}


def _dims(model, tensor: str) -> list | None:
    """The tensor's declared dimensions (a name for a symbolic one, an int, or None), if declared."""
    for info in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if info.name == tensor:
            return [d.dim_param or (d.dim_value if d.HasField("dim_value") else None)
                    for d in info.type.tensor_type.shape.dim]
    return None


def baked_batch(model) -> list[Finding]:
    """Reshape/Expand whose target shape fixes dim 0 to a constant while its input's batch is symbolic,
    unless the output still carries that batch elsewhere: a reshape that adds a leading unit
    dimension ([batch, d] -> [1, batch, d], as nn.MultiheadAttention does for a single query) bakes
    nothing."""
    constants = _constants(model)
    symbols = batch_symbols(model)
    found = []
    for node in model.graph.node:
        if node.op_type not in ("Reshape", "Expand") or len(node.input) < 2 or node.input[1] not in constants:
            continue
        shape = constants[node.input[1]].reshape(-1)
        # dim 0 carries the input's symbolic batch (not just any unknown dimension: graphs rewritten by
        # optimisers come back with `unk__` symbols), and the batch does not survive in another dimension.
        batch = (_dims(model, node.input[0]) or [None])[0]
        if not (shape.size and int(shape[0]) > 0 and batch in symbols):
            continue
        if batch in (_dims(model, node.output[0]) or [])[1:]:
            continue
        found.append(Finding("baked-batch", "error", node.name or node.output[0],
                             f"{node.op_type} fixes the batch dimension to {int(shape[0])} in a dynamic-batch "
                             f"graph (a reshape with a literal batch size in the model code?)"))
    return found


def random_ops(model) -> list[Finding]:
    found = []
    for node in model.graph.node:
        name = node.name or node.output[0]
        if node.op_type in RANDOM_OPS:
            found.append(Finding("random-op", "error", name,
                                 f"{node.op_type} makes outputs random: the model was exported with "
                                 "randomness active (dropout in training mode?)"))
        elif node.op_type == "Dropout" and len(node.input) >= 3 and node.input[2]:
            found.append(Finding("random-op", "error", name,
                                 "Dropout with a training_mode input: dropout may be active at inference"))
    return found


def decomposed_layernorm(model, target_precision: str) -> list[Finding]:
    """Find ReduceMean->Sub->Pow->ReduceMean->Add->Sqrt->Div chains (consumers followed by output name)."""
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = []
    for node in model.graph.node:
        if node.op_type != DECOMPOSED_LAYERNORM[0]:
            continue
        if _follows(node, DECOMPOSED_LAYERNORM[1:], consumers):
            severity = "warning" if target_precision == "fp16" else "info"
            found.append(Finding("decomposed-layernorm", severity, node.name or node.output[0],
                                 "LayerNorm is decomposed into primitive ops; an fp16 engine may overflow in its "
                                 "Pow/ReduceMean (export at opset >= 17 or keep these layers in fp32)"))
    return found


def _follows(node, chain, consumers) -> bool:
    if not chain:
        return True
    return any(nxt.op_type == chain[0] and _follows(nxt, chain[1:], consumers)
               for out in node.output for nxt in consumers.get(out, []))
