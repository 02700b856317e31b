"""The bench regression gates: is a new benchmark slower than a baseline beyond the margin? The
comparison goes into the result (JSON, tables); the caller raises RegressionError (exit 5) when
`regressions` says so. (The parity gate, "less accurate than a baseline", is vitexport.verify.baseline.)

Two bench gates, both on per-round timings (vitexport.bench.rounds) and rank statistics (vitexport.bench.stats):
- A/B (`--baseline ARTIFACT`): the baseline is measured in the same run, its rounds paired with the
  candidate's. The verdict is on the paired per-round ratios: slower when the whole confidence
  interval of the ratio lies beyond 1 + margin. This is the gate to put in CI.
- A stored report (`--baseline OLD.json`): rounds of two runs minutes or days apart are not paired,
  and the machine may have been in another state. Rounds in which the reference kernel shows a
  disturbed machine are set aside on each side; the shift of the rest must exceed the margin with its
  whole interval, both as measured and normalised by the reference kernel. When neither "slower"
  nor "within the margin" can be shown the rows are measured again (the caller does, within its
  budget), and then the comparison says "inconclusive" with the reason, never "slower".

Rows are compared only between like runs: the same backend, precision, batch size and artifact file
name; for a stored report also the same model and input shape, on the same kind of machine with the
same threads (`MACHINE_FIELDS`). Library versions, driver, OS and Python may differ: catching what
an upgrade did is the point. Rows that cannot be compared are listed with the reason, never dropped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError

# Fingerprint fields that must be equal for latencies to be comparable. A different CPU or GPU, a
# different thread count, or a Jetson in another power mode or with unlocked clocks changes the
# latency by more than any regression worth catching. Fields absent from an older report are skipped.
MACHINE_FIELDS = ("cpu", "machine", "gpus", "threads", "jetson_power_mode", "jetson_clocks")

# Default margins: the smallest slowdown worth failing. Both sides measured now, paired, resolve a
# few percent; two runs apart in time carry the machine's drift between them, hence more.
AB_MARGIN = 0.05
STORED_MARGIN = 0.10
MIN_PAIRS = 8  # a 95 % signed-rank interval needs at least 6 pairs; 8 make it useful
MIN_QUIET = 4  # undisturbed rounds needed on each side of a stored comparison
# The reference kernel in undisturbed rounds may differ by this much between two runs of one machine
# before their states count as different.
STATE_TOLERANCE = 0.10
# Undisturbed rounds of one run whose medians still vary more than this (robust CV) were disturbed in
# ways the reference kernel did not catch: a quiet machine keeps them within a few percent.
QUIET_SPREAD = 0.10



def read_json(path: Path, what: str) -> dict:
    from vitexport.core import jsonfile

    data = jsonfile.read_json(Path(path), "--baseline")
    if not isinstance(data, dict):
        raise UsageError(f"--baseline {path} is not {what}")
    return data


# ------------------------------------------------------------------------------------------------ bench


def check_slowdown(max_slowdown: float | None) -> None:
    if max_slowdown is not None:
        from vitexport.core.options import check_number

        check_number(max_slowdown, "--max-slowdown", minimum=0, maximum=1e6)


def margin(max_slowdown: float | None, paired: bool) -> float:
    """The slowdown (a fraction) a row must exceed with its whole interval to count as slower."""
    if max_slowdown is not None:
        return max_slowdown / 100.0
    return AB_MARGIN if paired else STORED_MARGIN


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


def key(row: dict) -> tuple:
    # The artifact's file name too: one report may time several artifacts of one backend and
    # precision (int8 dynamic and static, say), which must not be compared with each other.
    return row.get("backend"), row.get("precision"), row.get("batch_size"), row.get("artifact")


def name(key: tuple) -> str:
    backend, precision, batch, artifact = key
    return f"{backend} {precision} batch {batch}" + (f" ({artifact})" if artifact else "")


def rounds_of(row: dict) -> tuple[list[float], list[float | None]]:
    """A row's per-round medians and the reference kernel of each round ([] for older reports)."""
    per = row.get("per_round") or {}
    medians = list(per.get("median_ms") or [])
    refs = (list(per.get("reference_ms") or []) + [None] * len(medians))[:len(medians)]
    kept = [(m, r if isinstance(r, (int, float)) and r > 0 else None) for m, r in zip(medians, refs)
            if isinstance(m, (int, float)) and m > 0]  # a hand-edited report may hold anything
    return [m for m, _ in kept], [r for _, r in kept]


# --- A/B: paired rounds ------------------------------------------------------------------------------------

def pair_rows(candidates: list[dict], baselines: list[dict]) -> tuple[list[tuple[dict, dict]], list[dict]]:
    """Candidate rows matched with baseline rows as report rows are matched (backend, precision,
    batch, artifact file name); rows left over are then matched by backend, precision and batch
    where that leaves one on each side (a PR's artifact and main's under another file name).
    Returns the pairs and the unmatched entries (with their reasons)."""
    pairs, left_c, left_b = [], list(candidates), list(baselines)
    for c in candidates:
        b = next((b for b in left_b if key(b) == key(c)), None)
        if b is not None:
            pairs.append((c, b))
            left_c.remove(c)
            left_b.remove(b)
    for c in list(left_c):
        loose = [b for b in left_b if key(b)[:3] == key(c)[:3]]
        if len(loose) == 1 and sum(key(o)[:3] == key(c)[:3] for o in left_c) == 1:
            pairs.append((c, loose[0]))
            left_c.remove(c)
            left_b.remove(loose[0])
    unmatched = [{"row": name(key(c)), "side": "now", "reason": "no baseline artifact of this backend, precision "
                  "and batch"} for c in left_c]
    unmatched += [{"row": name(key(b)), "side": "baseline", "reason": "no candidate of this backend, precision "
                   "and batch"} for b in left_b]
    return pairs, unmatched


def ab_verdict(candidate: list[float], baseline: list[float], limit: float, min_pairs: int = MIN_PAIRS
               ) -> dict[str, Any]:
    """candidate / baseline from per-round medians paired by round, judged against `limit` (1 + margin);
    with fewer than `min_pairs` rounds in which both ran, undecided."""
    from vitexport.bench.stats import paired_ratio

    n = min(len(candidate), len(baseline))
    if n < 1:
        return {"verdict": "undecided", "why": "no rounds in which both sides ran", "rounds": 0}
    shift = paired_ratio(candidate[:n], baseline[:n])
    out = {"ratio": shift.ratio, "low": shift.low, "high": shift.high, "rounds": n,
           "confidence": shift.confidence}
    if n < min_pairs or not shift.bounded:
        return {**out, "verdict": "undecided", "why": f"{n} paired rounds are too few (at least {min_pairs})"}
    if shift.beyond(limit):
        return {**out, "verdict": "slower", "why": f"the whole interval lies above {limit:.2f}x"}
    if shift.within(limit):
        return {**out, "verdict": "ok", "why": f"a slowdown beyond {limit:.2f}x is ruled out"}
    return {**out, "verdict": "undecided",
            "why": f"the interval {_interval(out)} reaches past {limit:.2f}x without lying beyond it"}


def compare_ab(pairs: list[tuple[dict, dict]], unmatched: list[dict], paths: list[str],
               max_slowdown: float | None, final: bool) -> dict:
    """The A/B comparison of each pair (its rows' per-round medians must be aligned by round)."""
    m = margin(max_slowdown, paired=True)
    compared = []
    for cand, base in pairs:
        if not cand.get("available") or not base.get("available"):
            side, row = ("now", cand) if not cand.get("available") else ("baseline", base)
            unmatched.append({"row": name(key(cand)), "side": side,
                              "reason": f"could not run{' (baseline)' if side == 'baseline' else ''}: "
                                        f"{row.get('reason') or 'unknown'}"})
            continue
        verdict = ab_verdict(rounds_of(cand)[0], rounds_of(base)[0], 1 + m)
        compared.append(_entry(cand, base, verdict, m, final))
    rule = (f"A/B in one run: slower when the {_pct(0.95)} interval of the paired per-round ratio lies above "
            f"{1 + m:.2f}x")
    return _comparison(", ".join(paths), "artifacts", rule, max_slowdown, {}, compared, unmatched)


# --- a stored report ------------------------------------------------------------------------------------

def stored_verdict(now: dict, old: dict, limit: float) -> dict[str, Any]:
    """A row now against the same row of a stored report, judged against `limit` (1 + margin)."""
    from vitexport.bench.conditions import disturbed
    from vitexport.bench.stats import median, ratio_shift, ratio_to, relative_spread

    x, x_ref = rounds_of(now)
    y, y_ref = rounds_of(old)
    if not x:
        return {"verdict": "undecided", "why": "no rounds measured now", "rounds": 0}
    quiet_x = [i for i, d in enumerate(disturbed(x_ref)) if not d]
    if not y:  # a report from before rounds were kept: its p50 alone, the machine's state then unknown
        shift = ratio_to([x[i] for i in quiet_x], old["latency_ms"]["p50"])
        out = {"ratio": shift.ratio, "low": shift.low, "high": shift.high, "rounds": len(quiet_x),
               "confidence": shift.confidence, "note": "the baseline keeps no rounds: its p50 alone, "
                                                       "the machine's state then unknown"}
        return {**out, **_judge(shift, None, limit, None)}
    quiet_y = [j for j, d in enumerate(disturbed(y_ref)) if not d]
    xs, ys = [x[i] for i in quiet_x], [y[j] for j in quiet_y]  # never empty: the fastest round is quiet
    raw = ratio_shift(xs, ys)
    out: dict[str, Any] = {"ratio": raw.ratio, "low": raw.low, "high": raw.high, "rounds": [len(x), len(y)],
                           "undisturbed_rounds": [len(xs), len(ys)], "confidence": raw.confidence}
    norm, state = None, None
    if all(x_ref[i] for i in quiet_x) and all(y_ref[j] for j in quiet_y):
        norm = ratio_shift([x[i] / x_ref[i] for i in quiet_x], [y[j] / y_ref[j] for j in quiet_y])
        state = median([x_ref[i] for i in quiet_x]) / median([y_ref[j] for j in quiet_y])
        out.update(normalised={"ratio": norm.ratio, "low": norm.low, "high": norm.high}, reference_ratio=state)
    spread = (relative_spread(xs) or 0.0, relative_spread(ys) or 0.0)
    out["spread"] = list(spread)
    noisy_now = len(xs) < MIN_QUIET or spread[0] > QUIET_SPREAD
    noisy_then = len(ys) < MIN_QUIET or spread[1] > QUIET_SPREAD
    judged = _judge(raw, norm, limit, state)
    # A disturbance only adds time: a noisy run now can invent a slowdown but never hide one, a noisy
    # baseline can hide one but never invent it.
    verdict = judged["verdict"]
    if not {"slower": noisy_now, "ok": noisy_then}.get(verdict, noisy_now or noisy_then):
        return {**out, **judged}
    if len(xs) < MIN_QUIET or len(ys) < MIN_QUIET:
        why = f"too few undisturbed rounds ({len(xs)} of {len(x)} now, {len(ys)} of {len(y)} in the baseline)"
    else:
        why = (f"the undisturbed rounds still vary by {spread[0]:.0%} now and {spread[1]:.0%} in the baseline "
               "(a quiet machine: a few percent)")
    gross = beyond_noise(x, x_ref, y, y_ref, limit)
    if gross is not None:
        return {**out, **gross.to_dict(), "verdict": "slower",
                "why": f"every round now took more than {limit:.2f}x the slowest round of the baseline, also "
                       "normalised by the reference kernel: more than a disturbance can explain"}
    return {**out, "verdict": "undecided", "disturbed": True, "why": why}


def beyond_noise(x: list[float], x_ref: list, y: list[float], y_ref: list, limit: float):
    """The shift over all rounds when no disturbance can explain it, else None. A disturbance only
    ever adds time: when even the fastest round now is slower than the slowest round of the baseline
    by more than the limit, and the rounds normalised by their reference kernel say so too (a run
    that was slow throughout slowed its reference kernel with it), the row is slower."""
    from vitexport.bench.stats import ratio_shift

    if min(x) <= limit * max(y):
        return None
    raw = ratio_shift(x, y)
    if all(x_ref) and all(y_ref):
        norm = ratio_shift([m / r for m, r in zip(x, x_ref)], [m / r for m, r in zip(y, y_ref)])
        if not norm.beyond(limit):
            return None
    return raw


def _judge(raw, norm, limit: float, state: float | None) -> dict[str, Any]:
    """Slower only when the measured and the normalised intervals both lie beyond the limit; within
    the margin when the measured interval rules a slowdown out (and, when the reference kernel says
    the machine was in another state, the normalised one too: a slow baseline can hide a slowdown);
    else undecided, saying why. When the reference kernel says the machine is slower now, the
    normalised interval must lie beyond the limit times that slowdown: a model and a small product do
    not suffer alike from a slow phase (seen on a shared VM: the model 1.47x, the kernel 1.19x)."""
    off = state is not None and abs(math.log(state)) > math.log1p(STATE_TOLERANCE)
    slower_machine = state if off and state > 1 else 1.0
    if raw.beyond(limit) and (norm is None or norm.beyond(limit * slower_machine)):
        return {"verdict": "slower", "why": f"the whole interval lies above {limit:.2f}x"
                + (", also normalised by the reference kernel" if norm else "")
                + (f" (beyond {limit * slower_machine:.2f}x: the machine ran {state:.2f}x slower)"
                   if slower_machine > 1 else "")}
    if raw.within(limit) and (not off or norm is None or norm.within(limit)):
        return {"verdict": "ok", "why": f"a slowdown beyond {limit:.2f}x is ruled out"}
    if off:
        return {"verdict": "undecided", "disturbed": True,
                "why": f"the reference kernel ran {state:.2f}x as long as in the baseline's undisturbed rounds"}
    if norm is not None and raw.beyond(limit) and not norm.beyond(limit):
        return {"verdict": "undecided", "disturbed": True,
                "why": "slower as measured but not once normalised by the reference kernel"}
    spread = (raw.high - raw.low) / 2 if raw.bounded else None
    return {"verdict": "undecided",
            "why": "the spread between rounds" + (f" (±{spread:.0%})" if spread is not None else "")
                   + f" is too wide to tell a change of {limit - 1:.0%}"}


def compare_bench(report: dict, baseline: dict, path: Path, max_slowdown: float | None = None,
                  final: bool = True) -> dict:
    """Compare each row of `report` with the baseline's like row. Adds `vs_baseline` to every
    compared row and returns the comparison, which the report keeps under `baseline`. With `final`,
    rows that could not be decided are `inconclusive`; else `undecided` (to be measured again)."""
    m = margin(max_slowdown, paired=False)
    differs = machine_differences(report, baseline)
    old_rows = {key(r): r for r in baseline.get("results", [])}
    new_keys = {key(r) for r in report["results"]}
    compared, unmatched = [], []
    for row in report["results"]:
        k = key(row)
        old = old_rows.get(k)
        reason = _why_unmatched(row, old, differs)
        if reason:
            unmatched.append({"row": name(k), "side": "now", "reason": reason})
            continue
        compared.append(_entry(row, old, stored_verdict(row, old, 1 + m), m, final))
    for k, old in old_rows.items():
        if k not in new_keys:
            unmatched.append({"row": name(k), "side": "baseline", "reason": "not measured now"})
    rule = (f"against a stored report: slower when the {_pct(0.95)} interval of the shift in undisturbed rounds "
            f"lies above {1 + m:.2f}x, as measured and normalised by the reference kernel")
    out = _comparison(str(path), "report", rule, max_slowdown, differs, compared, unmatched)
    if any(c.get("disturbed") for c in out["inconclusive"]):
        out["machine"] = _machine_note(report, baseline)
    return out


def _entry(row: dict, old: dict, verdict: dict, m: float, final: bool) -> dict:
    if final and verdict["verdict"] == "undecided":
        verdict = {**verdict, "verdict": "inconclusive"}
    p50, old_p50 = row["latency_ms"]["p50"], old["latency_ms"]["p50"]
    ratio = verdict.get("ratio")
    row["vs_baseline"] = {"baseline_p50_ms": old_p50, "change": (ratio - 1) if ratio else p50 / old_p50 - 1,
                          "low": _minus1(verdict.get("low")), "high": _minus1(verdict.get("high")),
                          "threshold": m, "verdict": verdict["verdict"], "regressed": verdict["verdict"] == "slower"}
    return {"row": name(key(row)), "baseline_row": name(key(old)), "p50_ms": p50, "baseline_p50_ms": old_p50,
            **verdict, "threshold": m, "change": row["vs_baseline"]["change"],
            "regressed": verdict["verdict"] == "slower", "cv": row.get("cv"), "baseline_cv": old.get("cv"),
            "unstable": bool(row.get("unstable") or old.get("unstable"))}


def _comparison(path: str, kind: str, rule: str, max_slowdown, differs, compared, unmatched) -> dict:
    return {"path": path, "kind": kind, "rule": rule, "max_slowdown_pct": max_slowdown,
            "machine_differences": differs, "compared": compared, "unmatched": unmatched,
            "regressions": [c for c in compared if c["verdict"] == "slower"],
            "undecided": [c for c in compared if c["verdict"] == "undecided"],
            "inconclusive": [c for c in compared if c["verdict"] == "inconclusive"]}


def _machine_note(report: dict, baseline: dict) -> str:
    """Steal and disturbed rounds on both sides, for the 'inconclusive' line."""
    def side(c: dict | None) -> str:
        if not c:
            return "unknown"
        steal = (c.get("steal") or {}).get("mean")
        return (f"{c.get('disturbed_rounds', 0)} of {c.get('rounds', 0)} rounds disturbed, "
                f"{c.get('phase_changes', 0)} phase changes" + (f", steal {steal:.1%}" if steal is not None else ""))
    return f"now {side(report.get('conditions'))}; baseline {side(baseline.get('conditions'))}"


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


def _minus1(value: float | None) -> float | None:
    return None if value is None else value - 1


def _pct(confidence: float) -> str:
    return f"{confidence:.0%}"


def _interval(c: dict) -> str:
    if c.get("low") is None or c.get("high") is None:
        return "(no interval)"
    return f"{c['low']:.2f}-{c['high']:.2f}x"


def verdict_text(c: dict) -> str:
    """'onnxruntime fp32 batch 1 (tiny.onnx) 1.32x (95 % interval 1.28-1.37x, 20 rounds), p50 22.9 ms vs
    17.3 ms, limit 1.05x'."""
    rounds = c.get("rounds")
    rounds = "+".join(map(str, rounds)) if isinstance(rounds, list) else rounds
    ratio = f"{c['ratio']:.2f}x" if c.get("ratio") else "?"
    text = (f"{c['row']} {ratio} ({_pct(c.get('confidence', 0.95))} interval {_interval(c)}, {rounds} rounds), "
            f"p50 {c['p50_ms']:.4g} ms vs {c['baseline_p50_ms']:.4g} ms, limit {1 + c['threshold']:.2f}x")
    if c.get("baseline_row") and c["baseline_row"] != c["row"]:
        text += f" [baseline {c['baseline_row']}]"
    return text


def slower(c: dict) -> str:
    return verdict_text(c)


def bench_message(comparison: dict) -> str:
    from vitexport.bench import holding

    slower_rows = sorted(comparison["regressions"], key=lambda c: -(c.get("ratio") or 0))
    costs = comparison.get("costlier", [])  # memory and load (vitexport.bench.holding)
    parts = ([f"slower than the baseline {comparison['path']}: " + "; ".join(verdict_text(c) for c in slower_rows)]
             if slower_rows else [])
    if costs:
        parts.append(f"costlier to hold or load than the baseline {comparison['path']}: "
                     + "; ".join(holding.text(c) for c in costs))
    return "; ".join(parts)


def inconclusive_message(comparison: dict) -> str:
    rows = "; ".join(f"{c['row']}: {c['why']}" for c in comparison["inconclusive"])
    disturbed = any(c.get("disturbed") for c in comparison["inconclusive"])
    head = "inconclusive: the machine was disturbed" if disturbed else "inconclusive"
    machine = f" ({comparison['machine']})" if comparison.get("machine") else ""
    return f"{head}{machine}: {rows}"
