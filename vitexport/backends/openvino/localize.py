"""Where an IR's divergence starts: each encoder block's output read from OpenVINO and compared with
PyTorch's.

OpenVINO lets a model expose any node's output as an extra output. A node converted from a PyTorch
module keeps the module path in its name (`__module.blocks.3/aten::add/Add`), so the last computing
node inside a block's path is that block's output, and the first block's first input is the stem's.
The comparison itself is the ONNX backend's (per block, against PyTorch's forward hooks).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vitexport.backends.onnx_common.localize import (
    STEM,
    by_added_error,
    divergence,
    encoder_blocks,
    reference_block_outputs,
)
from vitexport.backends.openvino.quantize import constant_valued, in_scope, node_scope, ops_of
from vitexport.verify.parity import Divergence, Tolerance


def block_nodes(model, blocks: list[str]) -> dict:
    """{STEM: node, block path: node}: the nodes whose first outputs are the stem's and each block's."""
    ops = ops_of(model)
    last = {}
    for op in ops:  # topological order: the last one in a block's path is its output
        scope = node_scope(op.get_friendly_name())
        for path in blocks:
            if in_scope(scope, path):
                last[path] = op
    first = next((op for op in ops if blocks and in_scope(node_scope(op.get_friendly_name()), blocks[0])), None)
    stem = None
    if first is not None:  # what the first block reads that a computing node produced
        stem = next((v.get_node() for v in first.input_values()
                     if v.get_node().get_type_name() not in ("Constant", "Parameter")), None)
    return ({STEM: stem} if stem is not None else {}) | {path: last[path] for path in blocks if path in last}


def block_outputs(loaded, artifact: Path, record, x: np.ndarray):
    """Each encoder block's output from the IR and from PyTorch on `x`, in block order, or a string
    saying why they cannot be read. Runs on the device the IR was checked on (the CPU when that is
    absent), in the precision it is checked in."""
    from vitexport.backends.openvino.devices import compile_config, core, present, recorded_device, recorded_hint

    blocks = encoder_blocks(loaded.model)
    if not blocks:
        return "no encoder blocks found in the PyTorch model"
    model = core().read_model(str(artifact))
    nodes = block_nodes(model, blocks)
    if not any(path in nodes for path in blocks):
        return "the IR's node names carry no module paths"
    before = len(model.outputs)
    model.add_outputs([node.output(0) for node in nodes.values()])
    if len(model.outputs) != before + len(nodes):
        return "OpenVINO would not expose the blocks' outputs"
    device = recorded_device(record)
    device = device if present(device) else "CPU"
    compiled = core().compile_model(model, device, compile_config(record.precision, device, None,
                                                                  recorded_hint(record)))
    results = compiled.create_infer_request().infer({record.input_names[0]: np.ascontiguousarray(x)})
    values = {path: np.asarray(results[before + i]) for i, path in enumerate(nodes)}
    reference = reference_block_outputs(loaded.model, [b for b in nodes if b != STEM], x)
    return ({path: values[path] for path in nodes if path in reference},
            {path: reference[path] for path in nodes if path in reference})


def localize_ir(loaded, artifact: Path, record, x: np.ndarray, tol: Tolerance) -> Divergence:
    return divergence(block_outputs(loaded, artifact, record, x), tol)


def sensitive_blocks(loaded, artifact: Path, record, x: np.ndarray) -> list[tuple[str, float]] | str:
    return by_added_error(block_outputs(loaded, artifact, record, x))


def stem_scopes(artifact: Path, loaded) -> tuple[str, ...]:
    """The module paths of the nodes before the first encoder block (the patch embedding, ...)."""
    from vitexport.backends.openvino.devices import core

    blocks = encoder_blocks(loaded.model)
    scopes: list[str] = []
    for op in ops_of(core().read_model(str(artifact))):
        scope = node_scope(op.get_friendly_name())
        if blocks and in_scope(scope, blocks[0]):
            break
        if scope and scope not in scopes:
            scopes.append(scope)
    return tuple(scopes)


def head_input(artifact: Path, record, x: np.ndarray, head: str) -> np.ndarray | str:
    """The IR's own input to the module at `head` for `x` (what the first node converted from it reads,
    exposed as an extra output), or why it cannot be read; run as `block_outputs` runs."""
    from vitexport.backends.openvino.devices import compile_config, core, present, recorded_hint

    model = core().read_model(str(artifact))
    ops = [op for op in ops_of(model) if in_scope(node_scope(op.get_friendly_name()), head)]
    if not ops:
        return f"the IR's node names keep no node from the head's module path ({head})"
    memo: dict = {}  # the first value a head node reads that is computed, not a (decompressed) weight
    value = next((v for op in ops for v in op.input_values() if not constant_valued(v.get_node(), memo)), None)
    if value is None:
        return f"the nodes of the head ({head}) read only constants"
    before = len(model.outputs)
    model.add_outputs([value])
    if len(model.outputs) != before + 1:
        return "OpenVINO would not expose the head's input"
    device = (record.options.get("device") or "CPU").upper()
    device = device if present(device) else "CPU"
    compiled = core().compile_model(model, device, compile_config(record.precision, device, None,
                                                                  recorded_hint(record)))
    results = compiled.create_infer_request().infer({record.input_names[0]: np.ascontiguousarray(x)})
    return np.asarray(results[before])
