"""Latency statistics: warm-up, then timed runs, each bracketed by an optional device sync."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# Above this coefficient of variation a p50 is not a number to compare runtimes with: the machine
# was busy, clocks moved, or the runtime has bimodal behaviour. Flag it rather than hide it.
UNSTABLE_CV = 0.10


@dataclass
class LatencyStats:
    samples_ms: list[float] = field(repr=False)
    batch_size: int

    def _q(self, q: float) -> float:
        return float(np.percentile(self.samples_ms, q))

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples_ms))

    @property
    def std(self) -> float:
        return float(np.std(self.samples_ms, ddof=1)) if len(self.samples_ms) > 1 else 0.0

    @property
    def cv(self) -> float:
        return self.std / self.mean if self.mean > 0 else 0.0

    @property
    def unstable(self) -> bool:
        return self.cv > UNSTABLE_CV

    @property
    def throughput_ips(self) -> float:
        return self.batch_size / (self.mean / 1000.0) if self.mean > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "latency_ms": {"mean": self.mean, "std": self.std, "min": min(self.samples_ms), "max": max(self.samples_ms),
                           "p50": self._q(50), "p90": self._q(90), "p99": self._q(99)},
            "throughput_ips": self.throughput_ips,
            "cv": self.cv,
            "unstable": self.unstable,
            "iterations": len(self.samples_ms),
        }


def measure(run_once: Callable[[], object], *, batch_size: int, warmup_iters: int = 5, warmup_s: float = 1.0,
            iters: int | None = None, budget_s: float | None = 5.0, min_iters: int = 10,
            sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter) -> LatencyStats:
    """Warm up for at least `warmup_iters` runs AND `warmup_s` seconds, then time either exactly
    `iters` runs or as many as fit in `budget_s` (never fewer than `min_iters`)."""
    if iters is None and budget_s is None:
        raise ValueError("give iters or budget_s")
    sync = sync or (lambda: None)
    start, done = clock(), 0
    while done < warmup_iters or clock() - start < warmup_s:
        run_once()
        sync()
        done += 1
    samples: list[float] = []
    begin = clock()
    while True:
        t0 = clock()
        run_once()
        sync()  # on a GPU, wait for the work itself, not just its launch
        samples.append((clock() - t0) * 1000.0)
        if iters is not None:
            if len(samples) >= iters:
                break
        elif len(samples) >= min_iters and clock() - begin >= budget_s:
            break
    return LatencyStats(samples, batch_size)
