"""The machine's achievable GEMM rate, measured with ONNX Runtime on the CPU, so a ViT's throughput
can be stated as a fraction of what this machine's matrix units deliver at all (a ViT spends most
of its FLOPs in GEMMs, so this is its practical ceiling here)."""

from __future__ import annotations

import time


def _matmul_model(n: int) -> bytes:
    """A one-node ONNX graph, c = a @ b, for n x n float32 matrices."""
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm", [a, b], [c])
    # onnx 1.23 stamps IR version 14 by default, which ONNX Runtime 1.31 refuses; MatMul needs nothing newer.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString()


def gemm_rate(n: int = 2048, threads: int | None = None, seconds: float = 2.0) -> dict:
    """GFLOP/s of one n^3 float32 MatMul in ONNX Runtime's CPU provider, over at least 3 runs and
    `seconds`. `gflops` is from the fastest run (what the machine can reach); `gflops_median`
    shows how much a busy machine took off."""
    import numpy as np

    if n < 1 or seconds < 0:
        raise ValueError("n must be positive and seconds not negative")
    rng = np.random.default_rng(0)
    feed = {"a": rng.standard_normal((n, n), dtype=np.float32), "b": rng.standard_normal((n, n), dtype=np.float32)}
    session = _session(_matmul_model(n), threads)
    out = session.run(None, feed)[0]  # warm-up: thread pool start, packing buffers
    # A wrong product would make the rate meaningless; one row checked against numpy is cheap.
    if not np.allclose(out[0], feed["a"][0] @ feed["b"], rtol=1e-3, atol=1e-3 * n ** 0.5):
        raise RuntimeError("ONNX Runtime's MatMul disagrees with numpy; the GEMM rate would be meaningless")
    return {**_rate(session, feed, n, seconds), "threads": threads, "provider": "CPUExecutionProvider",
            "dtype": "float32"}


def int8_gemm_rate(n: int = 2048, threads: int | None = None, seconds: float = 2.0) -> dict:
    """The same n^3 product as `gemm_rate`, with the weight quantised the way `--precision int8`
    quantises a ViT's (dynamic, signed int8 weights), so ONNX Runtime runs the int8 kernel an int8
    ViT runs (DynamicQuantizeMatMul). `gflops` counts the same 2 n^3 operations: int8 rows divide by it."""
    import tempfile
    from pathlib import Path

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from .backends.onnx.quantize import quiet_quantizer

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32), "w")
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["c"])], "gemm_int8", [a], [c], [weight])
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), str(fp32))
        with quiet_quantizer():
            quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        session = _session(int8.read_bytes(), threads)
    feed = {"a": rng.standard_normal((n, n), dtype=np.float32)}
    session.run(None, feed)
    return {**_rate(session, feed, n, seconds), "threads": threads, "provider": "CPUExecutionProvider",
            "dtype": "int8 (dynamic, weights signed)"}


def _session(model: bytes, threads: int | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _rate(session, feed: dict, n: int, seconds: float) -> dict:
    """Run `session` at least 3 times and `seconds`; the rate of the best and of the median run."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    flop = 2.0 * n ** 3
    best, median = min(times), sorted(times)[len(times) // 2]
    return {"n": n, "gflops": flop / best / 1e9, "gflops_median": flop / median / 1e9, "best_s": best,
            "median_s": median, "runs": len(times)}


def cuda_gemm_rate(n: int = 8192, seconds: float = 1.0, dtype: str = "float32") -> dict:
    """The same measurement on the CUDA device with torch.matmul, timed by CUDA events: the ceiling
    for rows that ran on the GPU (a CPU rate would make a GPU look 20x "above roofline").
    float32 keeps torch's default precision (TF32 only where the user enabled it), like the runners."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=dt, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=dt, generator=gen)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.matmul(a, b)  # warm-up: cuBLAS handle and kernel selection
    torch.cuda.synchronize()
    times: list[float] = []
    begin = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - begin < seconds:
        start.record()
        torch.matmul(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    flop = 2.0 * n ** 3
    best, median = min(times), sorted(times)[len(times) // 2]
    return {"n": n, "gflops": flop / best / 1e9, "gflops_median": flop / median / 1e9, "best_s": best,
            "median_s": median, "runs": len(times), "provider": "torch-cuda", "device": torch.cuda.get_device_name(),
            "dtype": dtype, "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


def basis(provider: str | None) -> str | None:
    """For rows written before each backend named its own basis (`Backend.roofline_basis`): which
    measured GEMM rate a provider's row compares with, "cpu", "cuda", or None."""
    p = (provider or "").lower()
    if p.endswith("-cpu") or p in ("cpuexecutionprovider", "mil-evaluator"):
        return "cpu"
    if "cuda" in p or "tensorrt" in p:
        return "cuda"
    return None


def attach_fractions(report: dict, gflop_per_image: float | None) -> None:
    """Set each available row's `roofline_fraction` against the rate of the processor it ran on:
    `report["roofline"]` (CPU) or `report["roofline_cuda"]`; None where that rate is unknown."""
    rates = {"cpu": (report.get("roofline") or {}).get("gflops"),
             "cpu-int8": (report.get("roofline_int8") or {}).get("gflops"),
             "cuda": (report.get("roofline_cuda") or {}).get("gflops")}
    for row in report.get("results", []):
        if not row.get("available"):
            continue
        kind = row["roofline_basis"] if "roofline_basis" in row else basis(row.get("provider"))
        row["roofline_basis"] = kind
        row["roofline_fraction"] = fraction_of_roofline(gflop_per_image, row.get("throughput_ips"),
                                                        rates.get(kind)) if kind else None


def fraction_of_roofline(gflop_per_image: float, throughput_ips: float, gflops: float) -> float | None:
    """Achieved GFLOP/s (model GFLOP per image x images/s) over the measured GEMM rate; None when
    either side is unknown. Above 1 means the runtime beat the plain MatMul (e.g. a GPU against
    this CPU rate), not an error."""
    if not gflop_per_image or not gflops or gflops <= 0 or throughput_ips is None:
        return None
    return gflop_per_image * throughput_ips / gflops
