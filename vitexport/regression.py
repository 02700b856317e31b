"""Regression gates: is a new bench report slower, or a new verification less accurate, than a
baseline beyond the margin? The comparison goes into the result (JSON, tables); the caller raises
RegressionError (exit 5) when `regressed` says so.

Bench rows are compared only between like runs: the same backend, precision, batch size and
artifact file name, the same model and input shape, on the same kind of machine with the same
threads (`MACHINE_FIELDS`).
Library versions, driver, OS and Python may differ: catching what an upgrade did is the point.
Rows that cannot be compared are listed with the reason, never dropped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .errors import UsageError

# Fingerprint fields that must be equal for latencies to be comparable. A different CPU or GPU, a
# different thread count, or a Jetson in another power mode or with unlocked clocks changes the
# latency by more than any regression worth catching. Fields absent from an older report are skipped.
MACHINE_FIELDS = ("cpu", "machine", "gpus", "threads", "jetson_power_mode", "jetson_clocks")

# Default slowdown threshold: K times the combined spread of the two rows (their CVs added in
# quadrature), never below FLOOR. The CV is measured within one run; between runs the machine
# drifts more than that (frequency, other load), hence a generous K and the floor.
SPREAD_FACTOR = 3.0
FLOOR = 0.10

# Parity: an error more than ERROR_GROWTH times the baseline's is worse. Errors near zero (an
# exact TorchScript trace gives 0) are raised to 0.1% of the tolerance first, so noise far below
# anything the check would notice never counts as a regression.
ERROR_GROWTH = 2.0
NOISE_SHARE = 0.001


def read_json(path: Path, what: str) -> dict:
    from . import jsonfile

    data = jsonfile.read_json(Path(path), "--baseline")
    if not isinstance(data, dict):
        raise UsageError(f"--baseline {path} is not {what}")
    return data


# ------------------------------------------------------------------------------------------------ bench


def load_bench_baseline(path: Path) -> dict:
    """A single machine's bench report (a merged `compare` report mixes machines)."""
    from .report import is_merged, load

    report = load(Path(path))
    if is_merged(report) or report.get("merged_from"):
        raise UsageError(f"--baseline {path} merges several machines; give one machine's bench report")
    return report


def check_slowdown(max_slowdown: float | None) -> None:
    if max_slowdown is not None:
        from .options import check_number

        check_number(max_slowdown, "--max-slowdown", minimum=0, maximum=1e6)


def machine_differences(new: dict, old: dict) -> dict[str, list]:
    """MACHINE_FIELDS (and the model and input shape) that differ: {field: [baseline, now]}."""
    fp_new, fp_old = dict(new.get("fingerprint") or {}), dict(old.get("fingerprint") or {})
    # The thread count is a setting; older fingerprints may not carry it.
    for fp, report in ((fp_new, new), (fp_old, old)):
        fp["threads"] = (report.get("settings") or {}).get("threads", fp.get("threads"))
    out = {}
    for key in MACHINE_FIELDS:
        if key in fp_new and key in fp_old and fp_new[key] != fp_old[key]:
            out[key] = [fp_old[key], fp_new[key]]
    for key in ("model", "input_shape"):
        if new.get(key) is not None and old.get(key) is not None and new[key] != old[key]:
            out[key] = [old[key], new[key]]
    return out


def _key(row: dict) -> tuple:
    # The artifact's file name too: one report may time several artifacts of one backend and
    # precision (int8 dynamic and static, say), which must not be compared with each other.
    return row.get("backend"), row.get("precision"), row.get("batch_size"), row.get("artifact")


def _name(key: tuple) -> str:
    backend, precision, batch, artifact = key
    return f"{backend} {precision} batch {batch}" + (f" ({artifact})" if artifact else "")


def threshold(new_row: dict, old_row: dict, max_slowdown: float | None) -> float:
    """The slowdown (a fraction) beyond which this row counts as slower."""
    if max_slowdown is not None:
        return max_slowdown / 100.0
    spread = math.hypot(new_row.get("cv") or 0.0, old_row.get("cv") or 0.0)
    return max(FLOOR, SPREAD_FACTOR * spread)


def compare_bench(report: dict, baseline: dict, path: Path, max_slowdown: float | None = None) -> dict:
    """Compare each row of `report` with the baseline's like row (p50). Adds `vs_baseline` to every
    compared row and returns the comparison, which the report keeps under `baseline`."""
    rule = (f"slower when p50 grows by more than {max_slowdown:g}%" if max_slowdown is not None else
            f"slower when p50 grows by more than max({FLOOR:.0%}, {SPREAD_FACTOR:g} x hypot(CV now, CV baseline))")
    differs = machine_differences(report, baseline)
    old_rows = {_key(r): r for r in baseline.get("results", [])}
    new_keys = {_key(r) for r in report["results"]}
    compared, unmatched = [], []
    for row in report["results"]:
        key = _key(row)
        old = old_rows.get(key)
        reason = _why_unmatched(row, old, differs)
        if reason:
            unmatched.append({"row": _name(key), "side": "now", "reason": reason})
            continue
        p50, old_p50 = row["latency_ms"]["p50"], old["latency_ms"]["p50"]
        change = p50 / old_p50 - 1.0
        limit = threshold(row, old, max_slowdown)
        row["vs_baseline"] = {"baseline_p50_ms": old_p50, "change": change, "threshold": limit,
                              "regressed": change > limit}
        compared.append({"row": _name(key), "p50_ms": p50, **row["vs_baseline"], "cv": row.get("cv"),
                         "baseline_cv": old.get("cv"), "unstable": bool(row.get("unstable") or old.get("unstable"))})
    for key, old in old_rows.items():
        if key not in new_keys:
            unmatched.append({"row": _name(key), "side": "baseline", "reason": "not measured now"})
    return {"path": str(path), "rule": rule, "max_slowdown_pct": max_slowdown, "machine_differences": differs,
            "compared": compared, "unmatched": unmatched,
            "regressions": [c for c in compared if c["regressed"]]}


def _why_unmatched(row: dict, old: dict | None, differs: dict) -> str | None:
    if differs:
        return "measured on a different setup: " + "; ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in differs.items())
    if old is None:
        return "no such row in the baseline"
    if not row.get("available"):
        return f"could not run now: {row.get('reason') or 'unknown'}"
    if not old.get("available"):
        return f"could not run in the baseline: {old.get('reason') or 'unknown'}"
    return None


def slower(c: dict) -> str:
    """'torch fp32 batch 4 p50 1352 ms vs 522 ms (+159%, limit 131%)', and a warning when a run was unstable."""
    text = (f"{c['row']} p50 {c['p50_ms']:.4g} ms vs {c['baseline_p50_ms']:.4g} ms "
            f"({c['change']:+.0%}, limit {c['threshold']:.0%})")
    if c.get("unstable"):  # a busy machine, not necessarily slower code: say so next to the verdict
        text += f" [unstable: CV {c['cv'] or 0:.2f} now, {c['baseline_cv'] or 0:.2f} in the baseline]"
    return text


def bench_message(comparison: dict) -> str:
    worst = sorted(comparison["regressions"], key=lambda c: -c["change"])
    return f"slower than the baseline {comparison['path']}: " + "; ".join(slower(c) for c in worst)


# ----------------------------------------------------------------------------------------------- parity

# (metric, better when higher): the parity summary's worst-case numbers, and the image check's.
PARITY_METRICS = (("max_abs_error", False), ("mean_abs_error", False), ("cosine_similarity", True),
                  ("top1_agreement", True), ("top5_agreement", True), ("images.top1_agreement", True),
                  ("images.accuracy.candidate", True))


def load_parity_baseline(path: Path) -> dict:
    """A previous `verify --json` or export `--json` output with parity numbers."""
    data = read_json(Path(path), "a vitexport verify or export --json output")
    parity = data.get("parity")
    if not isinstance(parity, dict) or "backend" not in data:
        raise UsageError(f"--baseline {path} is not a vitexport verify or export --json output (no parity)")
    if parity.get("skipped") or parity.get("max_abs_error") is None:
        raise UsageError(f"--baseline {path} holds no parity numbers (the artifact was not checked there)")
    return data


def check_growth(factor: float) -> None:
    from .options import check_number

    check_number(factor, "--max-error-growth", minimum=1, maximum=1e6)


def _metric(parity: dict, name: str) -> float | None:
    value: Any = parity
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def check_same_kind(baseline: dict, backend: str, precision: str, path: Path) -> None:
    """Parity of another backend or precision is judged by other tolerances: not a baseline."""
    if (baseline.get("backend"), baseline.get("precision")) != (backend, precision):
        raise UsageError(f"--baseline {path} is a {baseline.get('backend')} {baseline.get('precision')} result; "
                         f"this artifact is {backend} {precision}")


def compare_parity(result: dict, baseline: dict, path: Path, factor: float = ERROR_GROWTH) -> dict:
    """Each parity metric now against the baseline's: errors may grow up to `factor` (above the noise
    floor), cosine distance likewise, agreements and accuracy may not drop."""
    check_same_kind(baseline, result["backend"], result["precision"], path)
    now, old = result["parity"], baseline["parity"]
    metrics, unmatched = [], []
    for name, higher_is_better in PARITY_METRICS:
        a, b = _metric(old, name), _metric(now, name)
        if a is None and b is None:
            continue
        if a is None or b is None:
            unmatched.append({"metric": name, "reason": "not in the baseline" if a is None else "not measured now"})
            continue
        limit = _limit(name, a, now, factor)
        worse = b < limit if higher_is_better else b > limit
        metrics.append({"metric": name, "baseline": a, "now": b, "limit": limit, "regressed": bool(worse)})
    return {"path": str(path), "max_error_growth": factor, "metrics": metrics, "unmatched": unmatched,
            "regressions": [m for m in metrics if m["regressed"]]}


def _limit(name: str, old: float, parity: dict, factor: float) -> float:
    """The worst value still accepted for a metric whose baseline value is `old`."""
    if name.endswith("_error"):
        return factor * max(old, NOISE_SHARE * parity.get("atol", 0.0))
    if name == "cosine_similarity":  # the distance from 1 may grow like an error
        noise = NOISE_SHARE * (1.0 - parity.get("min_cosine", 1.0))
        return 1.0 - factor * max(1.0 - old, noise)
    return old  # agreement and accuracy: any drop on the same inputs is a different answer


def parity_message(comparison: dict) -> str:
    worse = "; ".join(f"{m['metric']} {m['now']:.6g} vs {m['baseline']:.6g} (limit {m['limit']:.6g})"
                      for m in comparison["regressions"])
    return f"less accurate than the baseline {comparison['path']}: {worse}"
