"""Reading a `.tflite` flatbuffer with the schema the LiteRT runtime ships (no interpreter): its op
types and counts, and its signature (the input and output names LiteRT's API calls them by)."""

from __future__ import annotations

from collections import Counter

from vitexport.core.errors import BackendUnavailable, RuntimeFailure

IDENTIFIER = b"TFL3"  # a .tflite file's flatbuffer identifier, bytes 4 to 8


def _schema():
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError as e:
        from vitexport.backends.litert.libs import missing

        raise missing(e, "ai-edge-litert") from None
    return schema_py_generated


def model_of(data: bytes):
    """The flatbuffer's root table, or RuntimeFailure for bytes that are not a LiteRT model."""
    if bytes(data[4:8]) != IDENTIFIER:
        raise RuntimeFailure("not a LiteRT model (no TFL3 flatbuffer identifier)")
    return _schema().Model.GetRootAsModel(data, 0)


def op_names() -> dict[int, str]:
    """Builtin op code -> its name in LiteRT's schema (FULLY_CONNECTED, BATCH_MATMUL, ...)."""
    ops = _schema().BuiltinOperator
    return {value: name for name, value in vars(ops).items() if not name.startswith("_")}


def op_counts(data: bytes) -> dict[str, int]:
    """{op type: count} over every subgraph, custom ops by their custom name."""
    try:
        model = model_of(data)
        names = op_names()
        codes = []
        for i in range(model.OperatorCodesLength()):
            code = model.OperatorCodes(i)
            # Codes past 127 live in BuiltinCode; the deprecated byte keeps older ones.
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            custom = code.CustomCode()
            codes.append(custom.decode() if custom else names.get(builtin, f"BUILTIN_{builtin}"))
        counted: Counter[str] = Counter()
        for s in range(model.SubgraphsLength()):
            graph = model.Subgraphs(s)
            for o in range(graph.OperatorsLength()):
                counted[codes[graph.Operators(o).OpcodeIndex()]] += 1
    except (BackendUnavailable, RuntimeFailure):
        raise
    except Exception as e:  # a truncated or damaged flatbuffer reads out of bounds
        raise RuntimeFailure(f"cannot read the LiteRT model's ops: {type(e).__name__}: {e}") from None
    return dict(sorted(counted.items()))


def signature(data: bytes) -> dict:
    """The first signature's key and its input and output names, the outputs in the model's order
    (litert-torch names them output_0, output_1, ...: output_2 comes before output_10)."""
    model = model_of(data)
    if not model.SignatureDefsLength():
        return {"key": None, "inputs": [], "outputs": []}
    sig = model.SignatureDefs(0)
    return {"key": sig.SignatureKey().decode(),
            "inputs": [sig.Inputs(i).Name().decode() for i in range(sig.InputsLength())],
            "outputs": sorted((sig.Outputs(i).Name().decode() for i in range(sig.OutputsLength())),
                              key=lambda name: (len(name), name))}
