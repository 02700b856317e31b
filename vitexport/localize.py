"""Where a divergence starts: compare each encoder block's output in the artifact with PyTorch's.

PyTorch side: forward hooks on the encoder blocks. ONNX side: the exporters keep the module path
of every node (legacy: in the node name, `/blocks.3/attn/MatMul`; dynamo: in the
`pkg.torch.onnx.name_scopes` metadata), so the last node inside a block's scope is its output,
which we expose as an extra graph output and read back from ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .parity import Tolerance, metrics


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


def reference_block_outputs(model, blocks: list[str], x: np.ndarray) -> dict[str, np.ndarray]:
    import torch

    from .sources import export_mode

    captured: dict[str, np.ndarray] = {}
    modules = dict(model.named_modules())
    hooks = []
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


def block_output_tensors(model_proto, blocks: list[str]) -> dict[str, str]:
    """Block path -> name of the last tensor produced inside that block's scope."""
    last: dict[str, str] = {}
    for node in model_proto.graph.node:  # ONNX graphs are stored in topological order
        scope = node_scope(node)
        for path in blocks:
            if scope == path or scope.startswith(path + "."):
                last[path] = node.output[0]
    return last


def localize_onnx(loaded, artifact: Path, x: np.ndarray, input_name: str, tol: Tolerance) -> dict:
    """Compare block outputs; return the first block that leaves tolerance, with per-block numbers."""
    import onnx
    import onnxruntime as ort

    blocks = encoder_blocks(loaded.model)
    if not blocks:
        return {"first_divergent_block": None, "reason": "no encoder blocks found in the PyTorch model", "blocks": []}
    proto = onnx.load(str(artifact), load_external_data=True)
    tensors = block_output_tensors(proto, blocks)
    if not tensors:
        return {"first_divergent_block": None, "reason": "the ONNX graph keeps no module scopes", "blocks": []}
    existing = {o.name for o in proto.graph.output}
    for name in tensors.values():
        if name not in existing:
            proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = list(tensors.values())
    values = dict(zip(wanted, session.run(wanted, {input_name: x})))
    reference = reference_block_outputs(loaded.model, list(tensors), x)
    rows, first = [], None
    for path, tensor in tensors.items():
        m = metrics(reference[path], values[tensor], tol)
        ok = m.get("within_tolerance", False) and m["cosine_similarity"] >= tol.min_cosine
        rows.append({"block": path, "passed": ok, "max_abs_error": m.get("max_abs_error"),
                     "cosine_similarity": m.get("cosine_similarity")})
        if not ok and first is None:
            first = path
    reason = None if first else "every encoder block matches; the divergence is after the last block (norm/head)"
    return {"first_divergent_block": first, "reason": reason, "blocks": rows}
