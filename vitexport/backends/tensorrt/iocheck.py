"""Does an engine keep its ONNX's contract? Same tensor names, roles, shapes and types."""

from __future__ import annotations

from pathlib import Path

# ONNX TensorProto element types -> the TensorRT DataType names engines report.
TRT_TYPE_OF_ONNX = {1: "FLOAT", 10: "HALF", 16: "BF16", 3: "INT8", 2: "UINT8", 6: "INT32", 7: "INT64", 9: "BOOL"}


def onnx_io(onnx_path: Path) -> list[dict]:
    """Name, mode, shape (-1 for symbolic dimensions) and TensorRT type name of the graph's I/O."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}  # old exports list weights among the inputs

    def row(value, mode):
        tensor = value.type.tensor_type
        return {"name": value.name, "mode": mode,
                "shape": [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim],
                "dtype": TRT_TYPE_OF_ONNX.get(tensor.elem_type, str(tensor.elem_type))}

    return [row(v, "input") for v in graph.input if v.name not in initializers] + \
           [row(v, "output") for v in graph.output]


def io_differences(onnx_path: Path, engine_io: list[dict]) -> list[str]:
    """What differs between the ONNX's I/O and the engine's; empty when the contract holds."""
    expected = {t["name"]: t for t in onnx_io(onnx_path)}
    got = {t["name"]: t for t in engine_io}
    problems = [f"{name} is missing from the engine" for name in expected if name not in got]
    problems += [f"{name} is not in the ONNX" for name in got if name not in expected]
    for name in expected.keys() & got.keys():
        for key in ("mode", "shape", "dtype"):
            same = _same_shape(expected[name], got[name]) if key == "shape" else expected[name][key] == got[name][key]
            if not same:
                problems.append(f"{name}: {key} {got[name][key]} in the engine, {expected[name][key]} in the ONNX")
    return sorted(problems)


def _same_shape(onnx_tensor: dict, engine_tensor: dict) -> bool:
    """Equal shapes, except that an output dimension the ONNX leaves unknown (-1) may be one the engine
    has worked out: exporters do not always carry shapes to the outputs (the legacy exporter declares a
    transformers encoder's last_hidden_state [-1, -1, -1]). An input's dimensions must match exactly:
    there an engine's fixed size would refuse what the ONNX accepts."""
    want, have = onnx_tensor["shape"], engine_tensor["shape"]
    if onnx_tensor["mode"] != "output" or len(want) != len(have):
        return want == have
    return all(w == h or w == -1 for w, h in zip(want, have))


def io_matches(onnx_path: Path, engine_io: list[dict]) -> bool:
    """True when the engine's tensors carry the ONNX's names, roles, shapes (-1 where symbolic) and
    types; otherwise the build is refused."""
    from vitexport.core.errors import ExportError

    problems = io_differences(onnx_path, engine_io)
    if problems:
        raise ExportError("the engine's inputs/outputs differ from the ONNX's: " + "; ".join(problems[:4]))
    return True
