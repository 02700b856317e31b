"""`bench --batch auto`: double the batch until throughput stops improving, a latency budget is
exceeded or memory runs short, and report the knee (the best images/s and the batch that gave it).

Each doubling is judged by paired rounds: batch b and batch 2b run in alternating bursts in the same
worker, and the gain is the Hodges-Lehmann estimate of the per-round throughput ratio, so a noise
phase that starts mid-sweep does not end it (or prolong it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from vitexport.bench.stats import Shift, paired_ratio

MIN_GAIN = 0.05  # doubling the batch must add at least 5 % images/s to be worth its latency
MAX_BATCH = 4096
MEMORY_HEADROOM = 1.5  # the next batch's projected extra memory times this must be available
STEP_ROUNDS = (3, 8)  # paired rounds per doubling: at least, at most (fewer when runs are long)


@dataclass
class Step:
    """One batch size of the sweep: its throughput, its p50, and its gain over the batch before."""

    batch: int
    throughput_ips: float
    p50_ms: float
    gain: Shift | None = None  # images/s at this batch over the batch before, from paired rounds
    rss_mb: float | None = None

    def to_dict(self) -> dict:
        return {"batch": self.batch, "throughput_ips": self.throughput_ips, "p50_ms": self.p50_ms,
                "gain": self.gain.to_dict() if self.gain else None, "rss_mb": self.rss_mb}


@dataclass
class Sweep:
    steps: list[Step] = field(default_factory=list)
    stopped: str = ""

    def knee(self, latency_budget_ms: float | None = None) -> Step | None:
        """The batch with the most images/s within the latency budget, reached only through real gains:
        each doubling counts when its paired interval lies wholly above 1 (or, where too few rounds give
        no interval, when its estimate is at least +MIN_GAIN). A knee whose own row shows fewer images/s
        than a smaller batch's is not one the table supports: the knee, its row and the sentence agree."""
        best = None
        for step in self.steps:
            if latency_budget_ms is not None and step.p50_ms > latency_budget_ms:
                break  # a larger batch only takes longer
            if best is not None and not (is_gain(step.gain) and step.throughput_ips >= best.throughput_ips):
                break
            best = step
        return best


def is_gain(gain: Shift | None) -> bool:
    """Doubling the batch bought images/s: the whole interval above 1, or (no interval) +MIN_GAIN."""
    if gain is None:
        return False
    return gain.beyond(1.0) if gain.bounded else gain.ratio >= 1 + MIN_GAIN


def stop_reason(batch: int, step: Step, latency_budget_ms: float | None, max_batch: int = MAX_BATCH) -> str | None:
    """Why the sweep ends after measuring `step` (batch 2b against b), or None to double again."""
    if latency_budget_ms is not None and step.p50_ms > latency_budget_ms:
        return f"batch {step.batch}: p50 {step.p50_ms:.4g} ms is over the latency budget of {latency_budget_ms:g} ms"
    if step.gain is not None and step.gain.ratio < 1 + MIN_GAIN:
        return (f"batch {step.batch} gives {step.gain.ratio - 1:+.0%} images/s over batch {batch} "
                f"(less than +{MIN_GAIN:.0%})")
    if step.batch * 2 > max_batch:
        return f"batch {step.batch * 2} would pass the largest batch ({max_batch})"
    return None


def memory_short(rss_mb: dict[int, float], batch: int, available_mb: float | None) -> str | None:
    """Whether doubling `batch` would run out of memory, projected from how memory grew with the
    batch so far; None when it fits or cannot be told (then a failure at the next batch ends it)."""
    known = sorted(b for b, v in rss_mb.items() if v)
    if available_mb is None or batch not in known or len(known) < 2:
        return None
    prev = known[known.index(batch) - 1] if known.index(batch) > 0 else None
    if prev is None:
        return None
    per_image = max(0.0, (rss_mb[batch] - rss_mb[prev]) / (batch - prev))
    need = per_image * batch * MEMORY_HEADROOM  # doubling adds `batch` more images
    if need > available_mb:
        return (f"batch {batch * 2} would need about {need / MEMORY_HEADROOM:.0f} MB more and "
                f"{available_mb:.0f} MB are available")
    return None


def available_mb() -> float | None:
    """MemAvailable from /proc/meminfo in MB (10^6 bytes), or None where it cannot be read."""
    from vitexport.bench.measure import proc_mb

    return proc_mb("/proc/meminfo", "MemAvailable")


def run(first, new_cell: Callable[[int], object], pair: Callable[[object, object, int], None],
        throughput: Callable[[object], tuple[float, float]], *, step_seconds: float,
        latency_budget_ms: float | None, max_batch: int = MAX_BATCH,
        memory: Callable[[], float | None] = available_mb) -> tuple[Sweep, dict[int, object]]:
    """Drive the sweep from the cell `first` (the first batch, prepared but not timed yet).

    new_cell(batch) -> a prepared cell at that batch (its `failure` set when it could not start);
    pair(a, b, rounds) runs that many rounds of the two cells back to back (b None: a alone);
    throughput(cell) -> (images/s, p50 ms) from everything the cell measured."""
    sweep, cells = Sweep(), {first.batch: first}
    current = first
    while True:
        batch, stop, nxt = current.batch, None, None
        if batch * 2 > max_batch:
            stop = f"batch {batch * 2} would pass the largest batch ({max_batch})"
        elif sweep.steps:
            stop = memory_short({s.batch: s.rss_mb for s in sweep.steps}, batch, memory())
        if stop is None:
            nxt = new_cell(batch * 2)
            if nxt.failure is not None:
                stop, nxt = f"batch {batch * 2} failed: {nxt.failure['reason']}", None
        done = paired(pair, current, nxt, step_seconds)
        if not sweep.steps:  # the first batch was timed in this step too
            if current.failure is not None:
                sweep.stopped = f"batch {batch} failed: {current.failure['reason']}"
                return sweep, cells
            ips, p50 = throughput(current)
            sweep.steps.append(Step(batch, ips, p50, rss_mb=current.rss_mb))
            if latency_budget_ms is not None and p50 > latency_budget_ms:
                sweep.stopped = f"batch {batch}: p50 {p50:.4g} ms is already over the latency budget"
                return sweep, cells
        if nxt is not None and nxt.failure is not None:
            stop = f"batch {nxt.batch} failed: {nxt.failure['reason']}"
        if stop is not None:
            sweep.stopped = stop
            return sweep, cells
        cells[nxt.batch] = nxt
        ips, p50 = throughput(nxt)
        # images/s ratio per round: (2b / t_2b) / (b / t_b) = 2 t_b / t_2b
        gain = paired_ratio([2 * t for t in current.recent(done)], nxt.recent(done))
        step = Step(nxt.batch, ips, p50, gain, nxt.rss_mb)
        sweep.steps.append(step)
        reason = stop_reason(batch, step, latency_budget_ms, max_batch)
        if reason:
            sweep.stopped = reason
            return sweep, cells
        current = nxt


def paired(pair: Callable, a, b, seconds: float) -> int:
    """Rounds of a and b back to back: at least STEP_ROUNDS[0], at most [1], fewer once `seconds`
    have passed (long runs at large batches). Returns how many ran with both sides."""
    lo, hi = STEP_ROUNDS
    start, done = time.monotonic(), 0
    while done < hi and a.failure is None and (b is None or b.failure is None):
        pair(a, b, 1)
        if a.failure is None and (b is None or b.failure is None):
            done += 1
        if done >= lo and time.monotonic() - start > seconds:
            break
    return done
