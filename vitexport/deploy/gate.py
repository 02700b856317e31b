"""The device's timing gate: `vitexport verify --device-report NEW --baseline OLD`, where OLD is an
earlier device report of the same artifact on the same device. Each case of NEW is compared with the
same case of OLD by bench's rule for a stored report (`vitexport.bench.regression.stored_verdict`: a
case's `per_round` is a bench row's): rounds the reference kernel says were disturbed are set aside,
and a case is slower only when the whole 95 % interval of the shift lies beyond the margin, as
measured and normalised by the reference kernel. What cannot be told from the noise is
"inconclusive", never "slower". The caller raises RegressionError (exit 5) on `regressions`, after
NEW's outputs passed (a wrong answer, exit 4, comes first).

OLD is data from elsewhere like NEW: read bounded and checked against the device report's schema.
A baseline that is not a device report, or one of another artifact or another device, is bad input
(exit 2): its latencies say nothing about this one's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError

SCHEMA = "vitexport.device-report/1"
# Facts that must be equal for two device reports' latencies to be comparable: another board, CPU,
# execution provider, compute units or Jetson power mode changes the latency by more than any
# regression worth catching. The runtime's version may differ: catching what an upgrade did is the point.
DEVICE_FIELDS = ("model", "cpu", "machine", "provider", "compute_units", "jetson_power_mode")
# What names the artifact in a report: the same file of the same backend, packaged for the same target.
ARTIFACT_FIELDS = ("backend", "artifact", "target")


def load_baseline(path: Path) -> dict[str, Any]:
    """The earlier device report at `path`; UsageError (exit 2) naming what it is instead."""
    from vitexport.core import jsonfile, schemas

    data = jsonfile.read_json(Path(path), "--baseline")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise UsageError(f"--baseline {path} is not a device report (schema {schema!r}); with --device-report it "
                         f"takes an earlier device-report.json of the same artifact on the same device")
    return schemas.check("device-report", data, f"--baseline {path} is not a readable device report")


def check_comparable(new: dict, old: dict, path: Path) -> None:
    """UsageError when the baseline times another artifact or ran on another device."""
    now_pkg, old_pkg = new.get("package") or {}, old.get("package") or {}
    for field in ARTIFACT_FIELDS:
        if now_pkg.get(field) is not None and old_pkg.get(field) is not None and now_pkg[field] != old_pkg[field]:
            raise UsageError(f"--baseline {path} is a report of another artifact ({field} {old_pkg[field]!r}, "
                             f"this report's is {now_pkg[field]!r}): compare a device report with an earlier one "
                             "of the same artifact")
    facts_now, facts_old = new.get("device") or {}, old.get("device") or {}
    differs = [f"{k} {facts_old[k]!r} -> {facts_now[k]!r}" for k in DEVICE_FIELDS
               if facts_now.get(k) is not None and facts_old.get(k) is not None and facts_now[k] != facts_old[k]]
    if differs:
        raise UsageError(f"--baseline {path} was measured on another device or setup ({'; '.join(differs)}): its "
                         "latencies say nothing about this one's")


def as_row(case: dict) -> dict:
    """A case's timing as bench's regression gate reads a row: its rounds and its p50."""
    return {"per_round": case.get("per_round") or {}, "latency_ms": {"p50": case.get("p50_ms")}}


def compare(new: dict, old: dict, path: Path) -> dict[str, Any]:
    """Every case of `new` against the same case of `old`: bench's stored-report verdict, with the
    rows that cannot be decided made "inconclusive"."""
    from vitexport.bench import regression

    check_comparable(new, old, path)
    margin = regression.margin(None, paired=False)
    now_cases = ((new.get("timings") or {}).get("cases")) or {}
    old_cases = ((old.get("timings") or {}).get("cases")) or {}
    compared, unmatched = [], []
    for name, case in now_cases.items():
        row = f"{name} (batch {case.get('batch')})"
        before = old_cases.get(name)
        reason = _why_unmatched(case, before)
        if reason:
            unmatched.append({"row": row, "side": "now", "reason": reason})
            continue
        verdict = regression.stored_verdict(as_row(case), as_row(before), 1 + margin)
        if verdict["verdict"] == "undecided":
            verdict = {**verdict, "verdict": "inconclusive"}
        ratio = verdict.get("ratio")
        compared.append({"row": row, "p50_ms": case["p50_ms"], "baseline_p50_ms": before["p50_ms"], **verdict,
                         "threshold": margin,
                         "change": (ratio - 1) if ratio else case["p50_ms"] / before["p50_ms"] - 1,
                         "regressed": verdict["verdict"] == "slower"})
    unmatched += [{"row": f"{name} (batch {c.get('batch')})", "side": "baseline", "reason": "not measured now"}
                  for name, c in old_cases.items() if name not in now_cases]
    out = {"path": str(path), "kind": "device report",
           "rule": f"against an earlier device report: slower when the 95% interval of the shift in undisturbed "
                   f"rounds lies above {1 + margin:.2f}x, as measured and normalised by the reference kernel",
           "max_slowdown_pct": None, "compared": compared, "unmatched": unmatched,
           "regressions": [c for c in compared if c["verdict"] == "slower"],
           "inconclusive": [c for c in compared if c["verdict"] == "inconclusive"]}
    if any(c.get("disturbed") for c in out["inconclusive"]):
        out["device"] = f"now {_state(new.get('conditions'))}; baseline {_state(old.get('conditions'))}"
    return out


def _why_unmatched(case: dict, before: dict | None) -> str | None:
    if before is None:
        return "no such case in the baseline"
    if case.get("batch") != before.get("batch"):
        return f"batch {before.get('batch')} in the baseline"
    if not case.get("p50_ms") or not before.get("p50_ms"):
        return "no timing " + ("now" if not case.get("p50_ms") else "in the baseline")
    return None


def _state(conditions: dict | None) -> str:
    if not conditions or not conditions.get("rounds"):
        return "no rounds kept"
    steal = (conditions.get("steal") or {}).get("mean")
    return (f"{conditions.get('disturbed_rounds', 0)} of {conditions['rounds']} rounds disturbed"
            + (f", steal {steal:.1%}" if steal is not None else ""))


def lines(comparison: dict) -> list[str]:
    """What the terminal shows: one line per case, then what was left out and why."""
    from vitexport.bench.regression import verdict_text

    out = [f"timing against {comparison['path']} ({comparison['rule']}):"]
    for c in comparison["compared"]:
        why = f" — {c['why']}" if c["verdict"] != "slower" and c.get("why") else ""
        out.append(f"  {c['verdict']}: {verdict_text(c)}{why}")
    out += [f"  not compared: {u['row']} ({u['side']}): {u['reason']}" for u in comparison["unmatched"]]
    if comparison.get("device"):
        out.append(f"  inconclusive: the device was disturbed ({comparison['device']})")
    return out


def message(comparison: dict) -> str:
    """The RegressionError's line."""
    from vitexport.bench.regression import verdict_text

    worst = sorted(comparison["regressions"], key=lambda c: -(c.get("ratio") or 0))
    return f"slower than the baseline {comparison['path']}: " + "; ".join(verdict_text(c) for c in worst)
