"""Timing one call many times: warm-up, timed runs, and the latency statistics of the samples.

Pure standard library: the same loop times an accuracy-search attempt while exporting, a GEMM for the
roofline and a benchmark row in its worker, so it sits in the core every stage may use.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from vitexport.core.errors import UsageError
from vitexport.core.roundstats import percentile  # noqa: F401  (the one a package's check carries too)

# Above this coefficient of variation (std / mean) a latency is not a number to choose a runtime by.
# Runtimes people weigh against each other often differ by 10-30%; with a spread that large between
# runs of the same runtime, the order can flip from one run to the next. A quiet machine gives
# 1-5% for a steady CPU or GPU inference, so more than 10% points at frequency scaling, other load,
# thermal throttling or allocator pauses: the row is kept but flagged.
UNSTABLE_CV = 0.10
MIN_ITERS = 10  # a time budget still yields enough samples for a p90 to mean something
MAX_ITERS = 200_000  # bounds memory when one run takes microseconds and the budget is long


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
