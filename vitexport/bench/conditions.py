"""The machine's state while a benchmark ran, round by round, so a reader (and the regression gate)
can tell noise from change: steal time, the clock, and a small reference kernel timed in every round.

On a shared 2-vCPU VM the second vCPU is taken away in phases of tens of seconds: two-thread work
then runs 1.5-2x slower while one-thread work does not change. The reference kernel (a small float32
matrix product on the benchmark's threads, in its own process) slows with it, so rounds whose
reference took much longer than the run's fastest were disturbed.
"""

from __future__ import annotations

import time
from typing import Any

from vitexport.bench import fingerprint
from vitexport.bench.stats import median
from vitexport.core import roundstats
from vitexport.core.roundstats import DISTURBED, disturbed, phase_changes  # noqa: F401  (bench's names for them)


class RoundClock:
    """Reads steal and the clock at the start and end of a round."""

    def __init__(self) -> None:
        self.start_times = fingerprint.cpu_times()
        self.t0 = time.monotonic()

    def finish(self, reference_ms: float | None) -> dict[str, Any]:
        ghz, _ = fingerprint.clock_ghz()
        steal = fingerprint.steal_share(self.start_times, fingerprint.cpu_times())
        return {"reference_ms": reference_ms, "steal": steal, "clock_ghz": ghz, "seconds": time.monotonic() - self.t0}


def summary(rounds: list[dict], threads: int, reference: dict | None) -> dict[str, Any]:
    """The report's `conditions`: what the machine was like over the run, every round kept (computed
    by vitexport.core.roundstats, which a package's check on the device runs too)."""
    return {"threads": threads, **roundstats.summary(rounds, reference, fingerprint.clock_ghz())}


def describe(c: dict | None) -> str:
    """One line for people: 'threads 2; 20 rounds in 24 s; steal 0.4 % (max 3 %); reference kernel
    118 GFLOP/s (64-134); clock 2.60 GHz (cpuinfo); 2 phase changes, 6 of 20 rounds disturbed'."""
    if not c:
        return ""
    threads = c.get("threads")
    threads = ", ".join(map(str, threads)) if isinstance(threads, list) else threads
    runs = f" of {c['runs']} runs" if (c.get("runs") or 1) > 1 else ""
    parts = [f"threads {threads}", f"{c.get('rounds')} rounds{runs} in {c.get('seconds') or 0:.0f} s"]
    steal = c.get("steal")
    if steal:
        parts.append(f"steal {steal['mean']:.1%} (max {steal['max']:.0%} in a round)")
    ref = c.get("reference_kernel")
    if ref and ref.get("gflops"):
        g = ref["gflops"]
        parts.append(f"reference kernel {g['median']:.0f} GFLOP/s ({g['worst']:.0f}-{g['best']:.0f})")
    clock = c.get("clock_ghz")
    if clock and clock.get("median"):
        parts.append(f"clock {clock['median']:.2f} GHz ({clock['source']})")
    if c.get("rounds"):
        parts.append(f"{c.get('phase_changes', 0)} phase change{'s' if c.get('phase_changes') != 1 else ''}, "
                     f"{c.get('disturbed_rounds', 0)} of {c['rounds']} rounds disturbed")
    return "; ".join(parts)


def combine(each: list[dict | None]) -> dict[str, Any] | None:
    """The conditions of several bench runs on one machine (a matrix times every cell and batch size
    in a run of its own) as one summary that `describe` reads: rounds, seconds, phase changes and
    disturbed rounds added up (each run judged its rounds against its own fastest), steal, the clock
    and the reference kernel over all of them, and `runs`, how many runs kept conditions. Rounds
    themselves are left in each run's own report. None when no run kept any."""
    known = [c for c in each if isinstance(c, dict)]
    if not known:
        return None
    threads = sorted({c["threads"] for c in known if c.get("threads") is not None})
    rounds = sum(c.get("rounds") or 0 for c in known)
    steals = [(c["steal"], c.get("rounds") or 1) for c in known if c.get("steal")]
    clocks = [c["clock_ghz"] for c in known if c.get("clock_ghz")]
    kernels = [c["reference_kernel"] for c in known if c.get("reference_kernel")]
    rates = [k["gflops"] for k in kernels if k.get("gflops")]
    return {
        "runs": len(known),
        "threads": threads[0] if len(threads) == 1 else threads,
        "rounds": rounds,
        "seconds": sum(c.get("seconds") or 0 for c in known),
        "steal": {"mean": sum(s["mean"] * n for s, n in steals) / sum(n for _, n in steals),
                  "max": max(s["max"] for s, _ in steals)} if steals else None,
        "clock_ghz": {"median": median([k["median"] for k in clocks]), "min": min(k["min"] for k in clocks),
                      "max": max(k["max"] for k in clocks), "source": clocks[0].get("source")} if clocks else None,
        "reference_kernel": {"what": kernels[0].get("what"),
                             "ms": {"median": median([k["ms"]["median"] for k in kernels]),
                                    "min": min(k["ms"]["min"] for k in kernels),
                                    "max": max(k["ms"]["max"] for k in kernels)},
                             "gflops": {"median": median([g["median"] for g in rates]),
                                        "best": max(g["best"] for g in rates),
                                        "worst": min(g["worst"] for g in rates)} if rates else None}
        if kernels else None,
        "phase_changes": sum(c.get("phase_changes") or 0 for c in known),
        "disturbed_rounds": sum(c.get("disturbed_rounds") or 0 for c in known),
    }
