"""`bench --profile`: a row's time per operator class and its top operators, from the runtime's own
profiler, and how much of the row's measured p50 the profiler accounts for.

The profiled runs come after a row's timing, in the same worker process, on a second session or
compiled model of the same artifact with the profiler on (`Runner.profile`): a profiler costs time,
so no timed run ever has one. What comes back is each operator's mean milliseconds per inference;
here it is put in classes (vitexport.bench.opclasses), and the classes add up to the profiled total
exactly, since every operator lands in one.

Pure standard library: the parent process summarises what the worker's profiler returned.
"""

from __future__ import annotations

import math
from typing import Any

from vitexport.bench.opclasses import CLASSES, classify

PROFILE_S = 1.0  # seconds of profiled runs per row, at the row's measured p50
MIN_RUNS, MAX_RUNS = 3, 20
WARMUP_RUNS = 2  # untimed by the profiler: a fresh session allocates and tunes in its first runs
TOP = 5  # operators named per row
# Outside these bounds, the profiler's total and the row's p50 are far apart: said in words.
ACCOUNTED_LOW, ACCOUNTED_HIGH = 0.8, 1.2


def profile_runs(p50_ms: float | None) -> int:
    """Profiled runs for a row whose p50 is `p50_ms`: about PROFILE_S of them, within the bounds."""
    if not p50_ms or p50_ms <= 0 or not math.isfinite(p50_ms):
        return MIN_RUNS
    return max(MIN_RUNS, min(MAX_RUNS, math.ceil(PROFILE_S * 1000.0 / p50_ms)))


def summarise(runtime: str, ops: list[list], runs: int, p50_ms: float | None,
              profiled_ms: float | None = None) -> dict[str, Any]:
    """A row's profile from its operators (`[name, op type, ms per inference]` each): ms and share of
    the p50 per class, each op type with its class, the top operators, and the share of the p50 the
    profiler accounts for (`accounted`: profiled total / p50). `profiled_ms`: the profiled runs' mean wall
    time (a mean, as the operators' times are, so the two compare: one slow run on a busy machine
    raises both)."""
    classes = {cls: 0.0 for cls in CLASSES}
    types: dict[tuple[str, str], dict[str, Any]] = {}
    for name, op_type, ms in ops:
        cls = classify(runtime, op_type, name)
        classes[cls] += ms
        entry = types.setdefault((op_type, cls), {"op_type": op_type, "class": cls, "ms": 0.0, "count": 0})
        entry["ms"] += ms
        entry["count"] += 1
    total = sum(classes.values())
    share = (lambda ms: ms / p50_ms) if p50_ms else (lambda ms: None)
    top = sorted(ops, key=lambda op: -op[2])[:TOP]
    return {
        "available": True, "runtime": runtime, "runs": runs, "operators": len(ops),
        "total_ms": total, "p50_ms": p50_ms, "accounted": share(total), "profiled_run_ms": profiled_ms,
        "classes": [{"class": cls, "label": CLASSES[cls], "ms": ms, "share": share(ms)} for cls, ms in classes.items()],
        "op_types": sorted(types.values(), key=lambda t: -t["ms"]),
        "top": [{"name": name, "op_type": op_type, "class": classify(runtime, op_type, name), "ms": ms,
                 "share": share(ms)} for name, op_type, ms in top],
    }


def unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def accounted_note(profile: dict) -> str | None:
    """Words for a profiled total far from the row's p50, else None."""
    accounted = profile.get("accounted")
    if accounted is None:
        return None
    if accounted < ACCOUNTED_LOW:
        return (f"the profiler accounts for only {accounted:.0%} of the p50: the rest is time between operators "
                "(the runtime's own overhead, host copies, waits)")
    if accounted > ACCOUNTED_HIGH:
        wall = profile.get("profiled_run_ms")
        if wall and profile["total_ms"] > ACCOUNTED_HIGH * wall:
            return (f"the profiler's operators add up to {accounted:.0%} of the p50 and more than its own runs' "
                    f"wall time ({wall:.1f} ms): its clock and the wall clock disagree, so read the shares "
                    "between classes, not the milliseconds")
        return (f"the profiler's operators add up to {accounted:.0%} of the p50: the runs were slower with the "
                f"profiler on" + (f" ({wall:.1f} ms a run)" if wall else ""))
    return None


def one_line(profile: dict) -> str:
    """The profile as one line under the table: classes by share, the top operator, what is accounted for."""
    if not profile.get("available"):
        return f"no profile: {profile.get('reason') or 'unknown'}"
    parts = [f"{c['label']} {c['ms']:.2f} ms" + (f" ({c['share']:.0%})" if c["share"] is not None else "")
             for c in sorted(profile["classes"], key=lambda c: -c["ms"]) if c["ms"] > 0]
    top = profile["top"][0] if profile["top"] else None
    line = ", ".join(parts) or "no operators reported"
    if top:
        line += f"; top: {top['op_type']} {top['ms']:.2f} ms"
    if profile.get("accounted") is not None:
        line += f"; profiled {profile['total_ms']:.2f} ms = {profile['accounted']:.0%} of p50"
    note = accounted_note(profile)
    return line + (f" ({note})" if note else "")
