"""The machine's achievable matrix rate, so a ViT's throughput can be stated as a share of what this
machine's matrix units deliver (a ViT spends most of its FLOPs in GEMMs: this is its ceiling here).

The rate is measured inside the benchmark's timed rounds, not once: a machine whose speed comes and
goes in phases would otherwise compare a model timed in a fast phase with a GEMM timed in a slow one
(and print more than 100 %). Each library that is installed runs the same n^3 product in its own
process (numpy's BLAS, ONNX Runtime's MLAS, torch, OpenVINO with f32 pinned), and the best of them
is the rate: a basis below what the machine does would flatter every row. Rows at reduced precision
get their own basis (bf16 with native bf16 units, int8 with VNNI/AMX kernels), and the CPU's
theoretical peak is given beside each measured rate.

The kernels here run inside a bench worker (vitexport.bench.worker); the rest runs in the parent.
"""

from __future__ import annotations

from vitexport.core.errors import explained

import importlib.util
from typing import Any, Callable

GEMM_N = 2048  # large enough to reach a BLAS's steady rate, small enough (48 MB) for any machine
CUDA_N = 8192
REFERENCE_N = 256  # the reference kernel: a 0.3 ms product on two cores, timed in every round
GEMM_BURSTS = 3  # bursts per library over a run; its rate is the best run among them
GEMM_RUNS = 2  # timed products per burst

# basis -> (precision of its theoretical peak, the (library, dtype) pairs that measure it)
BASES: dict[str, tuple[str | None, tuple[tuple[str, str], ...]]] = {
    "cpu": ("fp32", (("numpy", "float32"), ("onnxruntime", "float32"), ("torch", "float32"),
                     ("openvino", "float32"))),
    "cpu-bf16": ("bf16", (("torch", "bfloat16"), ("openvino", "bfloat16"))),
    "cpu-fp16": ("fp16", (("torch", "float16"),)),
    "cpu-int8": ("int8", (("onnxruntime", "int8"),)),
    "cuda": (None, (("torch-cuda", "float32"),)),
    "cuda-fp16": (None, (("torch-cuda", "float16"),)),
    "cuda-bf16": (None, (("torch-cuda", "bfloat16"),)),
}
# Where each basis's rate lives in a report (the first three keys predate the others).
REPORT_KEYS = {"cpu": "roofline", "cpu-int8": "roofline_int8", "cuda": "roofline_cuda", "cpu-bf16": "roofline_bf16",
               "cpu-fp16": "roofline_fp16", "cuda-fp16": "roofline_cuda_fp16", "cuda-bf16": "roofline_cuda_bf16"}
PACKAGES = {"numpy": "numpy", "onnxruntime": "onnxruntime", "torch": "torch", "openvino": "openvino",
            "torch-cuda": "torch"}


def basis_for(kind: str | None, precision: str, features: list[str] = ()) -> str | None:
    """The rate a row is measured against: its processor's (`kind`: "cpu", "cuda", None from
    `Backend.roofline_basis`), at its precision where that has units of its own. bf16 and fp16
    on a CPU without native units for them run through fp32 arithmetic: the fp32 rate then."""
    if kind is None:
        return None
    if kind == "cpu":
        native = {"bf16": ("AVX-512 BF16", "AMX-BF16", "BF16"), "fp16": ("AVX-512 FP16", "AMX-FP16")}
        if precision == "int8":
            return "cpu-int8"
        if precision in native and any(f in features for f in native[precision]):
            return f"cpu-{precision}"
        return "cpu"
    if kind == "cuda" and precision in ("fp16", "bf16"):
        return f"cuda-{precision}"
    if kind == "cuda" and precision == "int8":
        return None  # no int8 GPU rate is measured
    return kind


def installed(library: str) -> bool:
    return importlib.util.find_spec(PACKAGES[library]) is not None


# ------------------------------------------------------------------------------- kernels (in a worker)

def reference_kernel(threads: int) -> tuple[Callable[[], Any], float, str]:
    """The kernel timed in every round to read the machine's state: numpy's float32 product of two
    256 x 256 matrices on the benchmark's threads (what a two-thread runtime loses when a vCPU is
    taken away, this loses too)."""
    import numpy as np

    n = REFERENCE_N
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    return (lambda: np.matmul(a, b, out=c)), 2.0 * n ** 3, f"numpy float32 matmul {n}³ on {threads} threads"


def gemm_kernel(library: str, dtype: str, n: int, threads: int) -> tuple[Callable[[], Any], float, str]:
    """One n^3 product in `library` at `dtype`: (run, operations per run, description). Raises
    BackendUnavailable where the library or the precision cannot run here."""
    from vitexport.core.errors import BackendUnavailable

    if not installed(library):
        raise BackendUnavailable(f"{PACKAGES[library]} is not installed")
    build = {"numpy": _numpy, "onnxruntime": _onnxruntime, "torch": _torch, "torch-cuda": _torch,
             "openvino": _openvino}[library]
    run, check = build(library, dtype, n, threads)
    if check is not None:  # a wrong product would make the rate meaningless: one row against numpy
        check()
    return run, 2.0 * n ** 3, f"{library} {dtype} matmul {n}³"


def _operands(n: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)


def _checker(a, b, product: Callable[[], Any]) -> Callable[[], None]:
    def check() -> None:
        import numpy as np

        out = np.asarray(product(), dtype=np.float64)
        want = a[0].astype(np.float64) @ b.astype(np.float64)
        if not np.allclose(out[0], want, rtol=1e-2, atol=1e-2 * a.shape[0] ** 0.5):
            raise RuntimeError("the product disagrees with numpy; its rate would be meaningless")
    return check


def _numpy(library: str, dtype: str, n: int, threads: int):
    import numpy as np

    a, b = _operands(n)
    c = np.empty_like(a)
    return (lambda: np.matmul(a, b, out=c)), None


def _torch(library: str, dtype: str, n: int, threads: int):
    import torch

    from vitexport.core.errors import BackendUnavailable

    device = "cuda" if library == "torch-cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("no CUDA device visible to torch")
    a_np, b_np = _operands(n)
    dt = getattr(torch, dtype)
    a, b = torch.from_numpy(a_np).to(device, dt), torch.from_numpy(b_np).to(device, dt)
    c = torch.empty((n, n), device=device, dtype=dt)
    if device == "cuda":
        def run():
            torch.mm(a, b, out=c)
            torch.cuda.synchronize()  # the work, not its launch
    else:
        def run():
            torch.mm(a, b, out=c)
    product = lambda: (run(), c.float().cpu().numpy())[1]  # noqa: E731
    return run, _checker(a_np, b_np, product) if dtype == "float32" else None


def _matmul_model(n: int, weight=None) -> Any:
    """c = a @ b for n x n float32 matrices; b is a constant when `weight` is given."""
    from onnx import TensorProto, helper, numpy_helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])
    inputs, inits = [a], []
    if weight is None:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n]))
    else:
        inits.append(numpy_helper.from_array(weight, "b"))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm", inputs, [c], inits)
    # onnx 1.23 stamps IR version 14 by default, which ONNX Runtime 1.31 refuses; MatMul needs nothing newer.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _onnxruntime(library: str, dtype: str, n: int, threads: int):
    import onnxruntime as ort

    a, b = _operands(n)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    if dtype == "int8":
        model = _int8_model(n, b)
        feed = {"a": a}
    else:
        model = _matmul_model(n).SerializeToString()
        feed = {"a": a, "b": b}
    session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    run = lambda: session.run(None, feed)[0]  # noqa: E731
    return run, _checker(a, b, run) if dtype == "float32" else None


def _int8_model(n: int, weight) -> bytes:
    """The product with its weight quantised the way `--precision int8` quantises a ViT's (dynamic,
    signed int8 weights), so ONNX Runtime runs the kernel an int8 ViT runs (DynamicQuantizeMatMul)."""
    import tempfile
    from pathlib import Path

    from onnx import save
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from vitexport.core.environment import quiet_loggers

    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        save(_matmul_model(n, weight), str(fp32))
        with quiet_loggers(""):  # the quantiser's advice to pre-process goes to the root logger
            quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        return int8.read_bytes()


def _openvino(library: str, dtype: str, n: int, threads: int):
    from vitexport.core.errors import BackendUnavailable, import_optional
    from vitexport.core.telemetry import import_openvino

    ov = import_openvino()  # its telemetry declined first (core/telemetry.py)

    core = ov.Core()
    hint = {"float32": "f32", "bfloat16": "bf16"}.get(dtype)
    if hint is None:
        raise BackendUnavailable(f"no OpenVINO GEMM at {dtype}")
    if hint == "bf16" and "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        raise BackendUnavailable("this CPU has no native bf16 for OpenVINO")
    ops = import_optional("openvino.opset13", "OpenVINO GEMM rates", "openvino")

    a, b = _operands(n)
    pa, pb = ops.parameter([n, n], ov.Type.f32, name="a"), ops.parameter([n, n], ov.Type.f32, name="b")
    model = ov.Model([ops.matmul(pa, pb, False, False)], [pa, pb], "gemm")
    # f32 pinned: without a hint OpenVINO picks bf16 on CPUs that have it, and the rate would be bf16's.
    config = {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
              "NUM_STREAMS": 1}
    try:
        compiled = core.compile_model(model, "CPU", config)
    except RuntimeError as e:
        if hint != "bf16":
            raise
        # A CPU whose instruction set is capped (ONEDNN_MAX_CPU_ISA) still lists BF16 but has no bf16 kernels.

        raise BackendUnavailable(f"OpenVINO lists bf16 but cannot compile a bf16 product here: {explained(e)}") \
            from None
    request = compiled.create_infer_request()
    request.set_input_tensor(0, ov.Tensor(a))
    request.set_input_tensor(1, ov.Tensor(b))
    run = lambda: request.infer()  # noqa: E731
    product = lambda: (request.infer(), request.get_output_tensor(0).data)[1]  # noqa: E731
    return run, _checker(a, b, product) if dtype == "float32" else None


def gemm_rate(library: str = "onnxruntime", dtype: str = "float32", n: int = GEMM_N, threads: int = 1,
              seconds: float = 1.0) -> dict:
    """The rate of one library's product measured here, in this process (for a quick look; bench
    measures each library in its own worker, inside its rounds)."""
    from vitexport.core.timing import measure

    run, flop, what = gemm_kernel(library, dtype, n, threads)
    samples = measure(run, batch_size=1, warmup_iters=1, warmup_s=0, budget_s=seconds, min_iters=3).samples_ms
    return {"n": n, "what": what, **rates(flop, samples)}


def rates(flop: float, samples_ms: list[float]) -> dict:
    """GFLOP/s of the fastest and of the median run."""
    from vitexport.bench.stats import median

    return {"gflops": flop / min(samples_ms) / 1e6, "gflops_median": flop / median(samples_ms) / 1e6,
            "runs": len(samples_ms)}


# ------------------------------------------------------------------------------------ in the parent

def summarise(basis: str, measured: dict[str, dict], threads: int, n: int) -> dict:
    """A basis's entry in the report from each library's result ({library: {"samples_ms", "flop"} or
    {"unavailable": reason}}): the best library's rate, every library's, and the theoretical peak."""
    libraries: dict[str, dict] = {}
    for library, m in measured.items():
        libraries[library] = rates(m["flop"], m["samples_ms"]) | {"bursts": m.get("bursts")} \
            if m.get("samples_ms") else {"unavailable": m.get("unavailable") or "not measured"}
    timed = {k: v for k, v in libraries.items() if "gflops" in v}
    best = max(timed, key=lambda k: timed[k]["gflops"]) if timed else None
    out: dict[str, Any] = {"basis": basis, "n": n, "threads": threads, "library": best,
                           "gflops": timed[best]["gflops"] if best else None,
                           "gflops_median": timed[best]["gflops_median"] if best else None,
                           "dtype": BASES[basis][1][0][1] if basis in BASES else None, "libraries": libraries}
    precision = BASES.get(basis, (None, ()))[0]
    if precision:
        out["peak"] = peak(threads, precision, out["gflops"])
    return out


def peak(threads: int, precision: str, measured: float | None) -> dict:
    """The CPU's theoretical peak, and a note where the measured rate is above it: then the clock
    that could be read (a VM's nominal one) is below the clock the cores ran at."""
    from vitexport.bench.fingerprint import theoretical_peak

    p = theoretical_peak(threads, precision)
    if p["gflops"] and measured and measured > p["gflops"]:
        at_least = measured / (p["flop_per_cycle"] * p["cores"])
        p["note"] = (f"the measured rate is above this: the clock read ({p['ghz']:.2f} GHz, {p['clock_source']}) "
                     f"is below the one the cores ran at (at least {at_least:.2f} GHz)")
        p["gflops_at_least"] = measured
    return p


def rate_of(report: dict, basis: str) -> float | None:
    return (report.get(REPORT_KEYS.get(basis, "")) or {}).get("gflops")


def fractions(report: dict, gflop_per_image: float | None) -> list[str]:
    """Set each available row's `roofline_fraction` against the rate of its basis, and return the
    bases some row exceeded (a measurement error: the caller measures them again, then calls `cap`)."""
    over = []
    for row in report.get("results", []):
        if not row.get("available"):
            continue
        basis = row.get("roofline_basis")
        row["roofline_fraction"] = fraction_of_roofline(gflop_per_image, row.get("throughput_ips"),
                                                        rate_of(report, basis)) if basis else None
        if (row["roofline_fraction"] or 0) > 1.0 and basis not in over:
            over.append(basis)
    return over


def cap(report: dict) -> None:
    """A share above 1 of a rate measured on the same machine in the same rounds is an error of
    measurement, never a result: it is not shown, and the row says why."""
    for row in report.get("results", []):
        frac = row.get("roofline_fraction")
        if frac is not None and frac > 1.0:
            rate = rate_of(report, row["roofline_basis"])
            row["roofline_fraction"] = None
            row["roofline_note"] = (f"{frac:.0%} of the {row['roofline_basis']} GEMM rate ({rate:.0f} GFLOP/s) even "
                                    "after measuring it again: the runtime beat every library's product here, or its "
                                    "kernels use units the basis does not (not shown)")


def basis(provider: str | None) -> str | None:
    """For rows written before each backend named its own basis (`Backend.roofline_basis`): which
    measured GEMM rate a provider's row compares with, "cpu", "cuda", or None."""
    p = (provider or "").lower()
    if p.endswith("-cpu") or p in ("cpuexecutionprovider", "mil-evaluator"):
        return "cpu"
    if "cuda" in p or "tensorrt" in p:
        return "cuda"
    return None


def fraction_of_roofline(gflop_per_image: float | None, throughput_ips: float | None,
                         gflops: float | None) -> float | None:
    """Achieved GFLOP/s (model GFLOP per image x images/s) over the measured GEMM rate; None when
    either side is unknown."""
    if not gflop_per_image or not gflops or gflops <= 0 or throughput_ips is None:
        return None
    return gflop_per_image * throughput_ips / gflops
