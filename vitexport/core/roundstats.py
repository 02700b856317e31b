"""The statistics of timed runs and rounds, shared by `vitexport bench` and a package's check on the
device: percentiles, the median, the relative spread of round medians, which rounds the reference
kernel says were disturbed, how many rounds a time budget is cut into, and the `conditions` summary
of the rounds.

A deploy package carries this file as it is (listed and sha-verified in its manifest.json, like its
runner), so a device's latencies are computed by the same code as bench's. Hence it is standard
library only and runs on Python 3.8 (JetPack 5): no `X | Y` outside annotations, no `match`.
"""

from __future__ import annotations

import math

# Timed runs cut into rounds: one round (burst) is short enough that a phase of a noisy machine hits
# a round, not the whole measurement; at least MIN_ROUNDS give a rank interval, MAX_ROUNDS bound it.
BURST_S = 0.25
MIN_ROUNDS = 8
MAX_ROUNDS = 200

# A round whose reference kernel took more than this much longer than the run's fastest round was
# disturbed. The kernel varies by a few percent between quiet rounds; a vCPU taken away slows a
# two-thread kernel by 50-100 %.
DISTURBED = 0.25


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of nothing")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def relative_spread(values: list[float]) -> float | None:
    """A robust coefficient of variation: 1.4826 x the median absolute deviation over the median
    (equal to std / mean for normal data, but one wild round does not move it)."""
    if len(values) < 2:
        return None
    m = median(values)
    return 1.4826 * median([abs(v - m) for v in values]) / m if m > 0 else None


def latency(samples_ms: list[float]) -> dict:
    """The latency of every timed run: mean, min, max and the 50th, 90th and 99th percentiles (the
    99th is interpolated towards the maximum below 100 runs, not observed)."""
    if not samples_ms:
        raise ValueError("no samples")
    return {"mean": math.fsum(samples_ms) / len(samples_ms), "min": min(samples_ms), "max": max(samples_ms),
            "p50": percentile(samples_ms, 50), "p90": percentile(samples_ms, 90), "p99": percentile(samples_ms, 99)}


def round_count(budget_s: float) -> int:
    """Rounds of about BURST_S that fill a time budget: at least MIN_ROUNDS, at most MAX_ROUNDS."""
    return max(MIN_ROUNDS, min(MAX_ROUNDS, int(round(budget_s / BURST_S))))


def slower(a: float | None, b: float | None) -> float | None:
    """The slower of two reference readings (a round's reference is the slower of those either side)."""
    known = [x for x in (a, b) if x is not None]
    return max(known) if known else None


def disturbed(reference_ms: list) -> list:
    """Per round: did its reference kernel take more than DISTURBED longer than the fastest round's?
    Rounds without a reference reading count as undisturbed (nothing says otherwise)."""
    known = [r for r in reference_ms if r]
    if not known:
        return [False] * len(reference_ms)
    best = min(known)
    return [bool(r) and r > (1 + DISTURBED) * best for r in reference_ms]


def phase_changes(reference_ms: list) -> int:
    """How often the run went from quiet to disturbed or back."""
    flags = disturbed(reference_ms)
    return sum(a != b for a, b in zip(flags, flags[1:]))


def summary(rounds: list, reference: dict | None, clock_now: tuple = (None, "not readable")) -> dict:
    """What the machine was like over the rounds, every round kept: `rounds` are dicts of
    reference_ms (the round's slowest reading), reference_each_ms, steal (a share), clock_ghz and
    seconds; `reference` is {what, flop} of the reference kernel; `clock_now` (GHz, where it was read)
    stands in when no round read the clock."""
    refs = [r.get("reference_ms") for r in rounds]  # each round's slowest reading: did anything disturb it
    known = [v for r in rounds for v in (r.get("reference_each_ms") or [r.get("reference_ms")]) if v]
    steal = [r["steal"] for r in rounds if r.get("steal") is not None]
    clocks = [r["clock_ghz"] for r in rounds if r.get("clock_ghz")]
    flop = (reference or {}).get("flop")
    ghz, source = clock_now
    out = {
        "rounds": len(rounds),
        "seconds": sum(r.get("seconds") or 0 for r in rounds),
        "steal": {"mean": sum(steal) / len(steal), "max": max(steal)} if steal else None,
        "clock_ghz": {"median": median(clocks), "min": min(clocks), "max": max(clocks), "source": source}
        if clocks else ({"median": ghz, "min": ghz, "max": ghz, "source": source} if ghz else None),
        "reference_kernel": None,
        "phase_changes": phase_changes(refs),
        "disturbed_rounds": sum(disturbed(refs)),
        "per_round": rounds,
    }
    if known and reference:
        out["reference_kernel"] = {"what": reference.get("what"),
                                   "ms": {"median": median(known), "min": min(known), "max": max(known)},
                                   "gflops": {"median": flop / median(known) / 1e6, "best": flop / min(known) / 1e6,
                                              "worst": flop / max(known) / 1e6} if flop else None}
    return out
