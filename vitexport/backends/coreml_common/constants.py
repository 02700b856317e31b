"""Computations on parameters alone, done once at export: a node of an op Core ML cannot convert whose
inputs do not depend on the model's input (a bicubic resize of position embeddings to the fixed
input's grid, as YOLOS and ViTMatte make on every forward) is a constant. It is computed here, in
float32 on this machine, and the graph holds its value instead. A resize of an activation depends on
the input: a bicubic one becomes matrix products (vitexport.backends.coreml_common.bicubic); grid
sampling stays, and the converter names it."""

from __future__ import annotations

# Ops coremltools has no converter for that task heads apply to parameters.
FOLDABLE = ("upsample_bicubic2d.vec", "upsample_bicubic2d.default", "_upsample_bicubic2d_aa.vec",
            "_upsample_bicubic2d_aa.default", "grid_sampler_2d.default")


def targets(kind: str = "") -> tuple:
    """The FOLDABLE ops this torch has whose name holds `kind` ("bicubic": the resizes alone)."""
    import torch

    found = []
    for name in FOLDABLE:
        packet, _, overload = name.partition(".")
        op = getattr(torch.ops.aten, packet, None)
        if kind in name and op is not None and hasattr(op, overload):
            found.append(getattr(op, overload))
    return tuple(found)


def constant_nodes(gm, inputs: set[str] | None = None) -> list:
    """The FOLDABLE nodes whose value no input (placeholders named in `inputs`, default every
    placeholder) reaches: on a lifted program, pass its user inputs, the parameters being placeholders too."""
    found, varying = targets(), set()
    for node in gm.graph.nodes:
        if (node.op == "placeholder" and (inputs is None or node.name in inputs)) \
                or any(arg in varying for arg in node.all_input_nodes):
            varying.add(node)
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in found and n not in varying]


def fold_constants(gm, example) -> int:
    """Replace each of `constant_nodes(gm)` by a buffer holding its value; return how many."""
    import torch

    nodes = constant_nodes(gm)
    if not nodes:
        return 0
    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n in nodes:
                values[n] = out.detach().clone()
            return out

    with torch.no_grad():
        Recorder(gm).run(example)
    for i, node in enumerate(nodes):
        name = f"vitexport_constant_{i}"
        gm.register_buffer(name, values[node])
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(constant)
        gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return len(nodes)
