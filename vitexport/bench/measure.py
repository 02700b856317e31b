"""Latency measurement: warm-up, timed runs, statistics, load and first-inference time, threads, memory.

Pure standard library at import time: the worker process must be able to fix its thread count
(`apply_threads`) before numpy, torch or ONNX Runtime is loaded.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

from vitexport.core.errors import UsageError

T = TypeVar("T")

# Above this coefficient of variation (std / mean) a latency is not a number to choose a runtime by.
# Runtimes people weigh against each other often differ by 10-30%; with a spread that large between
# runs of the same runtime, the order can flip from one run to the next. A quiet machine gives
# 1-5% for a steady CPU or GPU inference, so more than 10% points at frequency scaling, other load,
# thermal throttling or allocator pauses: the row is kept but flagged.
UNSTABLE_CV = 0.10
MIN_ITERS = 10  # a time budget still yields enough samples for a p90 to mean something
MAX_ITERS = 200_000  # bounds memory when one run takes microseconds and the budget is long

# Thread pools of OpenMP (torch, ONNX Runtime's MLAS on some builds), MKL and OpenBLAS read these once,
# when their library loads.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class LatencyStats:
    """Per-call latencies of one runtime at one batch size, in milliseconds."""

    samples_ms: list[float] = field(repr=False)
    batch_size: int
    unstable_cv: float = UNSTABLE_CV

    def __post_init__(self) -> None:
        if not self.samples_ms:
            raise ValueError("no samples")

    @property
    def count(self) -> int:
        return len(self.samples_ms)

    @property
    def mean(self) -> float:
        return math.fsum(self.samples_ms) / self.count

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1): the samples estimate the runtime's spread."""
        if self.count < 2:
            return 0.0
        m = self.mean
        return math.sqrt(math.fsum((x - m) ** 2 for x in self.samples_ms) / (self.count - 1))

    @property
    def min(self) -> float:
        return min(self.samples_ms)

    @property
    def max(self) -> float:
        return max(self.samples_ms)

    @property
    def p50(self) -> float:
        return percentile(self.samples_ms, 50)

    @property
    def p90(self) -> float:
        return percentile(self.samples_ms, 90)

    @property
    def p99(self) -> float:
        """With fewer than 100 samples this is interpolated towards the maximum, not observed."""
        return percentile(self.samples_ms, 99)

    @property
    def cv(self) -> float:
        return self.std / self.mean if self.mean > 0 else 0.0

    @property
    def unstable(self) -> bool:
        return self.cv > self.unstable_cv

    @property
    def throughput_ips(self) -> float:
        """Images per second at this batch size: batch / mean latency (mean, so it matches total time)."""
        return self.batch_size / (self.mean / 1000.0) if self.mean > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency_ms": {"mean": self.mean, "std": self.std, "min": self.min, "max": self.max,
                           "p50": self.p50, "p90": self.p90, "p99": self.p99},
            "throughput_ips": self.throughput_ips,
            "cv": self.cv,
            "unstable": self.unstable,
            "unstable_cv": self.unstable_cv,
            "iterations": self.count,
        }


class Timer(Protocol):
    """Times one call of `fn` and returns milliseconds."""

    name: str

    def __call__(self, fn: Callable[[], object]) -> float: ...


class WallTimer:
    """Host wall clock around the call and the optional sync: what the caller of the runtime waits.

    `sync` (e.g. torch.cuda.synchronize) belongs inside the timed region: without it a GPU call
    may return once its work is queued, and the time would be the launch, not the work."""

    name = "perf_counter"

    def __init__(self, sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter):
        self.sync, self.clock = sync, clock

    def __call__(self, fn: Callable[[], object]) -> float:
        t0 = self.clock()
        fn()
        if self.sync:
            self.sync()
        return (self.clock() - t0) * 1000.0


def measure(run_once: Callable[[], object], *, batch_size: int, warmup_iters: int = 5, warmup_s: float = 1.0,
            iters: int | None = None, budget_s: float | None = 5.0, min_iters: int = MIN_ITERS,
            max_iters: int = MAX_ITERS, sync: Callable[[], None] | None = None,
            clock: Callable[[], float] = time.perf_counter, timer: Timer | None = None,
            unstable_cv: float = UNSTABLE_CV) -> LatencyStats:
    """Warm up for at least `warmup_iters` runs AND at least `warmup_s` seconds (both are minimums:
    caches, allocators, JIT and clock boost need both), then time exactly `iters` runs when given,
    else runs until `budget_s` has passed, never fewer than `min_iters` nor more than `max_iters`.

    Each sample is `timer(run_once)`; the default timer is `clock` around `run_once` and `sync`."""
    if iters is None and budget_s is None:
        raise UsageError("give a number of timed runs or a time budget")
    if iters is not None and iters < 1:
        raise UsageError(f"timed runs must be at least 1, got {iters}")
    if iters is None and budget_s <= 0:
        raise UsageError(f"time budget must be positive, got {budget_s}")
    if warmup_iters < 0 or warmup_s < 0:
        raise UsageError("warm-up runs and seconds cannot be negative")
    if batch_size < 1:
        raise UsageError(f"batch size must be at least 1, got {batch_size}")
    timer = timer or WallTimer(sync, clock)

    start, done = clock(), 0
    while done < warmup_iters or clock() - start < warmup_s:
        run_once()
        if sync:
            sync()
        done += 1

    samples: list[float] = []
    begin = clock()
    while True:
        samples.append(timer(run_once))
        if iters is not None:
            if len(samples) >= iters:
                break
        elif len(samples) >= max_iters or (len(samples) >= min_iters and clock() - begin >= budget_s):
            break
    return LatencyStats(samples, batch_size, unstable_cv)


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
        import torch as _torch

        _torch.set_num_threads(threads)
        applied["torch"] = _torch.get_num_threads()
        applied["torch_interop"] = _torch.get_num_interop_threads()
    return applied


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
