"""What the delegate took and what it left to ExecuTorch's own kernels, per op type.

Partial delegation is never an error in ExecuTorch: an op the delegate refuses silently runs in the
portable/optimized CPU kernels, between delegate calls. The summary makes that visible (sidecar
`info["delegation"]`, shown after the parity table).
"""

from __future__ import annotations

# Rows of ExecuTorch's breakdown that are graph bookkeeping, not computation.
BOOKKEEPING = {"alloc", "getitem", "Total"}


def summarize(graph_module, delegate: str) -> dict:
    """{delegate, subgraphs, delegated_nodes, non_delegated_nodes, ops: {op: {delegated, not_delegated}},
    not_delegated: {op: count}} for a lowered edge graph."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(graph_module)
    ops = {}
    for op, row in sorted(info.delegation_by_operator.items()):
        if op in BOOKKEEPING:
            continue
        ops[_short(op)] = {"delegated": int(row.delegated), "not_delegated": int(row.non_delegated)}
    delegated = sum(r["delegated"] for r in ops.values())
    left = {op: r["not_delegated"] for op, r in ops.items() if r["not_delegated"]}
    return {"delegate": delegate, "subgraphs": int(info.num_delegated_subgraphs), "delegated_nodes": delegated,
            "non_delegated_nodes": sum(left.values()), "ops": ops, "not_delegated": left}


def _short(op_type: str) -> str:
    """`aten_native_layer_norm_default` -> `native_layer_norm`; overloads other than default keep
    their suffix (`mul_scalar` is not `mul_tensor`: XNNPACK takes only the second)."""
    name = op_type[len("aten_"):] if op_type.startswith("aten_") else op_type
    return name[: -len("_default")] if name.endswith("_default") else name
