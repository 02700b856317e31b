"""Graph optimisation of an exported ONNX: onnxslim (constant folding, shape-chain removal) or ONNX
Runtime's offline transformer optimizer (fused SkipLayerNorm and BiasGelu), and a quick measurement
of what each buys, so a report can say "none" when that is the truth."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from vitexport.core.errors import BackendUnavailable, ExportError, explained


def slim(src: Path, dst: Path) -> dict:
    """onnxslim: folds constants and the shape arithmetic the exporters write (ViT-B: ~1000 -> ~330
    nodes); the graph computes the same. Measured to make dynamic int8 faster (docs/backends/onnx.md, benchmarks/)."""
    import onnx

    try:
        import onnxslim
    except ImportError:
        raise BackendUnavailable("onnxslim is not installed: pip install onnxslim") from None
    model = onnx.load(str(src))
    before = len(model.graph.node)
    try:
        model = _slimmed(model, onnxslim)
    except Exception as e:
        raise ExportError(f"onnxslim failed: {type(e).__name__}: {explained(e)}") from None
    _save(model, dst)
    return {"tool": "onnxslim", "nodes_before": before, "nodes_after": len(model.graph.node)}


SLIM_PASSES = 10  # as onnxslim.slim: passes until the graph stops changing, at most this many


def _slimmed(model, onnxslim):
    """onnxslim.slim's loop (its passes, then its shape inference, until the graph stops changing),
    with the shape inference run on a copy without the weights' bytes: it serialises the model it is
    given several times, and shapes do not depend on weights. The same graph as `onnxslim.slim(path)`
    (tests/backends/test_onnx_slim.py), in a third of the time on ViT-B (4 s instead of 12)."""
    from onnxslim.core import shape_infer

    from vitexport.backends.onnx_common.lint import without_weights

    seen = None
    for _ in range(SLIM_PASSES):
        model = onnxslim.slim(model, no_shape_infer=True)
        shaped = shape_infer(without_weights(model))
        del model.graph.value_info[:]
        model.graph.value_info.extend(shaped.graph.value_info)
        nodes = [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node]
        if nodes == seen:
            break
        seen = nodes
    return model


def ort_transformer(src: Path, dst: Path) -> dict:
    """ONNX Runtime's transformer optimizer for ViTs (heads and width detected from the graph)."""
    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    before = len(onnx.load(str(src), load_external_data=False).graph.node)
    try:
        optimized = optimize_model(str(src), model_type="vit", num_heads=0, hidden_size=0, opt_level=1)
    except Exception as e:
        raise ExportError(f"ONNX Runtime's transformer optimizer failed: {type(e).__name__}: "
                          f"{explained(e)}") from None
    _save(optimized.model, dst)
    fused = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    return {"tool": "onnxruntime.transformers (vit)", "nodes_before": before,
            "nodes_after": len(optimized.model.graph.node), "fused": fused}


OPTIMIZERS = {"slim": slim, "ort": ort_transformer}


def _save(model, dst: Path) -> None:
    import onnx

    big = model.ByteSize() > 2_000_000_000 if hasattr(model, "ByteSize") else False
    onnx.save_model(model, str(dst), save_as_external_data=big, all_tensors_to_one_file=True,
                    location=dst.name + ".data", size_threshold=1024)


def speedup(baseline: Path, candidate: Path, feed: dict[str, np.ndarray], seconds: float = 2.0,
            threads: int | None = None) -> float:
    """Median latency of `baseline` over that of `candidate`, interleaved in one process (so both see
    the same machine state), at least 5 rounds and `seconds` of timing."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sessions = [ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]) for p in (baseline, candidate)]
    times: list[list[float]] = [[], []]
    for s in sessions:
        s.run(None, feed)  # warm-up
    start = time.perf_counter()
    while len(times[0]) < 5 or time.perf_counter() - start < seconds:
        for s, t in zip(sessions, times):
            t0 = time.perf_counter()
            s.run(None, feed)
            t.append(time.perf_counter() - t0)
    return statistics.median(times[0]) / statistics.median(times[1])
