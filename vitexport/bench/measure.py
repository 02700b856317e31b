"""What a benchmark process measures around the timing loop (vitexport.core.timing): load and
first-inference time, thread pools, memory.

Pure standard library at import time: the worker process must be able to fix its thread count
(`apply_threads`) before numpy, torch or ONNX Runtime is loaded.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, TypeVar

from vitexport.core.errors import UsageError
from vitexport.core.timing import WallTimer

T = TypeVar("T")

# Thread pools of OpenMP (torch, ONNX Runtime's MLAS on some builds), MKL and OpenBLAS read these once,
# when their library loads.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def time_load(fn: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> tuple[T, float]:
    """Call `fn` (open a session, deserialize an engine, ...) and return its result and seconds taken."""
    t0 = clock()
    result = fn()
    return result, clock() - t0


def first_inference_ms(run_once: Callable[[], object], *, sync: Callable[[], None] | None = None,
                       clock: Callable[[], float] = time.perf_counter) -> float:
    """The first call after load, timed alone: lazy initialisation, autotuning and kernel compilation
    land here, which steady-state percentiles would hide and a cold-start user pays."""
    return WallTimer(sync, clock)(run_once)


def thread_env(threads: int) -> dict[str, str]:
    """Environment that fixes the OpenMP/MKL/OpenBLAS pools: give it to a fresh subprocess."""
    return {name: str(threads) for name in THREAD_ENV}


def ort_thread_options(threads: int) -> dict[str, int]:
    """ONNX Runtime SessionOptions values for `threads`: one intra-op pool, no inter-op parallelism
    (a ViT graph is one chain; a second pool would only compete for the same cores)."""
    return {"intra_op_num_threads": threads, "inter_op_num_threads": 1}


def apply_threads(threads: int, *, torch: bool = True) -> dict[str, Any]:
    """Fix this process's thread count and return what was applied, for the report.

    The environment variables only take effect for libraries not loaded yet, so call this first
    thing in a fresh worker process; `late` names the libraries that were already loaded."""
    if threads < 1:
        raise UsageError(f"threads must be at least 1, got {threads}")
    late = sorted(m for m in ("numpy", "torch", "onnxruntime") if m in sys.modules)
    env = thread_env(threads)
    os.environ.update(env)
    applied: dict[str, Any] = {"threads": threads, "env": env, "late": late, "ort": ort_thread_options(threads)}
    if torch:
        applied.update(torch_threads(threads))
    return applied


def torch_threads(threads: int) -> dict[str, int]:
    """Import torch, fix its intra-op pool at `threads` and return its pools' sizes, for the report."""
    import torch

    torch.set_num_threads(threads)
    return {"torch": torch.get_num_threads(), "torch_interop": torch.get_num_interop_threads()}


def peak_rss_mb() -> float:
    """This process's resident-memory high-water mark in MB (10^6 bytes).

    Linux's ru_maxrss survives fork and exec, so a worker started from a large parent would report
    the parent's peak; VmHWM belongs to the running program alone, so it is read first."""
    hwm = proc_mb("/proc/self/status", "VmHWM")
    if hwm is not None:
        return hwm
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6  # bytes on macOS, kB elsewhere


def current_rss_mb() -> float | None:
    """This process's resident memory now in MB (Linux), or None where it cannot be read: a batch
    sweep projects from it whether the next batch still fits."""
    return proc_mb("/proc/self/status", "VmRSS")


def proc_mb(path: str, name: str) -> float | None:
    """A kB field of a Linux /proc file (`VmRSS` of /proc/self/status, `MemAvailable` of /proc/meminfo)
    in MB (10^6 bytes), or None where it cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None


def peak_gpu_mb() -> float | None:
    """Peak memory held by torch's CUDA allocator in MB, or None when torch never used CUDA here.

    ONNX Runtime's and TensorRT's own allocations are not seen by it."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.max_memory_allocated() / 1e6
