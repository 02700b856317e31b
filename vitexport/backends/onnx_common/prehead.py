"""The input of a model's head read from an ONNX graph: the first node exported from the head's
module scope reads it, so that tensor is exposed as an extra graph output and read back from ONNX
Runtime (the graph on disk is not changed). Used when a constant output is judged on the pre-head
features instead (verify/prehead.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vitexport.backends.onnx_common.localize import in_scope, node_scope


def head_input_tensor(model_proto, head: str) -> str | None:
    """The name of the tensor the head's first node reads that another node produced (not a weight)."""
    produced = {out for node in model_proto.graph.node for out in node.output}
    graph_inputs = {i.name for i in model_proto.graph.input}
    for node in model_proto.graph.node:  # topological order: the head's first node reads its input
        if in_scope(node_scope(node), head):
            return next((name for name in node.input if name in produced or name in graph_inputs), None)
    return None


def head_input(artifact: Path, x: np.ndarray, input_name: str, head: str) -> np.ndarray | str:
    """The artifact's own input to the module at `head` for `x`, or why it cannot be read."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(artifact), load_external_data=True)
    tensor = head_input_tensor(proto, head)
    if tensor is None:
        return f"the ONNX graph keeps no node from the head's module scope ({head})"
    if tensor not in {o.name for o in proto.graph.output}:
        proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(tensor))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return np.asarray(session.run([tensor], {input_name: x})[0])
