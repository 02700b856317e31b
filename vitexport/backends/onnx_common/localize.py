"""Where a divergence starts: compare each encoder block's output in the artifact with PyTorch's.

PyTorch side: forward hooks on the encoder blocks. ONNX side: the exporters keep the module path
of every node (legacy: in the node name, `/blocks.3/attn/MatMul`; dynamo: in the
`pkg.torch.onnx.name_scopes` metadata), so the last node inside a block's scope is its output,
which we expose as an extra graph output and read back from ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vitexport.verify.parity import Divergence, Tolerance, metrics


def encoder_blocks(model) -> list[str]:
    """Module paths of the encoder blocks: the largest list of same-class composite children."""
    from torch import nn

    best: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        kinds = {type(c) for _, c in children}
        composite = all(any(True for _ in c.children()) for _, c in children)
        if len(children) >= 2 and len(kinds) == 1 and composite and len(children) > len(best):
            best = [f"{name}.{child}" if name else child for child, _ in children]
    return best


STEM = "(stem)"  # what comes before the first block: the patch embedding, class token, positions


def reference_block_outputs(model, blocks: list[str], x: np.ndarray) -> dict[str, np.ndarray]:
    """PyTorch's output of each block, and under STEM the first block's input."""
    import torch

    from vitexport.models.tracing import export_mode

    captured: dict[str, np.ndarray] = {}
    modules = dict(model.named_modules())

    def stem_hook(_module, inputs):
        captured.setdefault(STEM, inputs[0].detach().float().cpu().numpy())

    hooks = [modules[blocks[0]].register_forward_pre_hook(stem_hook)] if blocks else []
    for path in blocks:
        def hook(_module, _inputs, output, path=path):
            out = output[0] if isinstance(output, (tuple, list)) else output
            captured[path] = out.detach().float().cpu().numpy()
        hooks.append(modules[path].register_forward_hook(hook))
    try:
        with torch.inference_mode(), export_mode():
            model(torch.from_numpy(x))
    finally:
        for h in hooks:
            h.remove()
    return captured


def node_scope(node) -> str:
    """The module path a node was exported from ('' at the top level)."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            import ast

            scopes = [s for s in ast.literal_eval(prop.value) if s]
            return scopes[-2] if len(scopes) >= 2 else ""
    parts = [p for p in node.name.split("/") if p]
    return ".".join(parts[:-1])


def in_scope(scope: str, path: str) -> bool:
    return scope == path or scope.startswith(path + ".")


def block_output_tensors(model_proto, blocks: list[str]) -> dict[str, str]:
    """Block path -> name of the last tensor produced inside that block's scope."""
    last: dict[str, str] = {}
    for node in model_proto.graph.node:  # ONNX graphs are stored in topological order
        scope = node_scope(node)
        for path in blocks:
            if in_scope(scope, path):
                last[path] = node.output[0]
    return last


def stem_tensor(model_proto, blocks: list[str]) -> str | None:
    """The tensor the first block reads: the stem's output (produced by a node, not a weight)."""
    produced = {out for node in model_proto.graph.node for out in node.output}
    for node in model_proto.graph.node:
        if blocks and in_scope(node_scope(node), blocks[0]):
            return next((name for name in node.input if name in produced), None)
    return None


def stem_scopes(artifact: Path, loaded) -> tuple[str, ...]:
    """The module paths of the nodes before the first encoder block (the patch embedding, ...)."""
    import onnx

    blocks = encoder_blocks(loaded.model)
    scopes: list[str] = []
    for node in onnx.load(str(artifact), load_external_data=False).graph.node:
        scope = node_scope(node)
        if blocks and in_scope(scope, blocks[0]):
            break
        if scope and scope not in scopes:
            scopes.append(scope)
    return tuple(scopes)


def block_outputs(loaded, artifact: Path, x: np.ndarray, input_name: str):
    """Each encoder block's output from the artifact and from PyTorch, on `x`, in block order:
    ({block: artifact output}, {block: PyTorch output}), or a string saying why they cannot be read."""
    import onnx
    import onnxruntime as ort

    blocks = encoder_blocks(loaded.model)
    if not blocks:
        return "no encoder blocks found in the PyTorch model"
    proto = onnx.load(str(artifact), load_external_data=True)
    tensors = block_output_tensors(proto, blocks)
    if not tensors:
        return "the ONNX graph keeps no module scopes"
    stem = stem_tensor(proto, blocks)
    if stem is not None:
        tensors = {STEM: stem, **tensors}
    existing = {o.name for o in proto.graph.output}
    for name in tensors.values():
        if name not in existing:
            proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = list(tensors.values())
    values = dict(zip(wanted, session.run(wanted, {input_name: x})))
    reference = reference_block_outputs(loaded.model, [b for b in tensors if b != STEM], x)
    return ({path: values[tensor] for path, tensor in tensors.items() if path in reference},
            {path: reference[path] for path in tensors if path in reference})


def localize_onnx(loaded, artifact: Path, x: np.ndarray, input_name: str, tol: Tolerance) -> Divergence:
    """Compare block outputs; return the first block that leaves tolerance, with per-block numbers."""
    return divergence(block_outputs(loaded, artifact, x, input_name), tol)


def divergence(found, tol: Tolerance) -> Divergence:
    """The first block whose output leaves tolerance, from ({block: artifact output}, {block: PyTorch
    output}) in block order (any runtime's), or from a string saying why they could not be read."""
    if isinstance(found, str):
        return Divergence(None, found)
    values, reference = found
    rows, first = [], None
    for path in (p for p in values if p != STEM):
        m = metrics(reference[path], values[path], tol)
        ok = m.get("within_tolerance", False) and m["cosine_similarity"] >= tol.min_cosine
        rows.append({"block": path, "passed": ok, "max_abs_error": m.get("max_abs_error"),
                     "cosine_similarity": m.get("cosine_similarity")})
        if not ok and first is None:
            first = path
    reason = None if first else "every encoder block matches; the divergence is after the last block (norm/head)"
    return Divergence(first, reason, rows)


def sensitive_blocks(loaded, artifact: Path, x: np.ndarray, input_name: str) -> list[tuple[str, float]] | str:
    """The stem and the blocks by how much error each adds (its output's relative error minus that of
    what it reads), most first: where keeping float buys the most accuracy."""
    return by_added_error(block_outputs(loaded, artifact, x, input_name))


def by_added_error(found) -> list[tuple[str, float]] | str:
    """`sensitive_blocks` from block outputs read by any runtime (see `divergence`)."""
    if isinstance(found, str):
        return found
    values, reference = found
    added, before = [], 0.0
    for path in values:
        ref = reference[path].astype(np.float64)
        error = float(np.linalg.norm(values[path] - ref) / max(np.linalg.norm(ref), 1e-12))
        added.append((path, error - before))
        before = error
    return sorted(added, key=lambda item: -item[1])
