"""The machine's achievable GEMM rate, measured with ONNX Runtime in the benchmark's own process,
so ViT throughput can be stated as a fraction of what this CPU can do at all."""

from __future__ import annotations

import time

import numpy as np


def gemm_rate(n: int = 2048, threads: int | None = None, seconds: float = 2.0) -> dict:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm", [a, b], [c])
    # onnx 1.23 writes IR 14 by default, which ONNX Runtime 1.31 refuses.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {"a": rng.standard_normal((n, n), dtype=np.float32), "b": rng.standard_normal((n, n), dtype=np.float32)}
    session.run(None, feed)  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    # The fastest run is what the machine can achieve; the median shows how noisy it was.
    best, median = float(np.min(times)), float(np.median(times))
    return {"n": n, "gflops": 2 * n**3 / best / 1e9, "gflops_median": 2 * n**3 / median / 1e9, "best_s": best,
            "median_s": median, "runs": len(times)}


def fraction_of_roofline(gflop_per_image: float, throughput_ips: float, gflops: float) -> float:
    return gflop_per_image * throughput_ips / gflops if gflops > 0 else float("nan")
