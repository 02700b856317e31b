"""The bench gate on what a model costs to hold and load (vitexport.bench.loadcost's numbers):
against a baseline, a row whose model takes more memory or loads slower beyond the noise is a
regression (exit 5), as a slower latency is (vitexport.bench.regression).

Each side has one load measured, not rounds, so the margins are wide enough for the noise of one
sample: the model's memory (anonymous plus mapped) is steady between loads of one file by one runtime
(page and arena rounding: a few MB); a warm load is not: on a two-core machine running six test
workers beside it, a 40 ms warm load took 155 ms. A load is judged slower only beyond twice the
baseline's and a second more, which such noise does not reach and a model that now loads seconds
slower does. A side without the number (not Linux, an older report) is not judged.
"""

from __future__ import annotations

from typing import Any

MEMORY_MARGIN, MEMORY_FLOOR_MB = 0.10, 16.0  # bigger: beyond +10 % and +16 MB
LOAD_MARGIN, LOAD_FLOOR_S = 1.0, 1.0  # slower to load: beyond twice the baseline's and +1 s


def model_mb(row: dict) -> float | None:
    anon, mapped = row.get("model_anon_mb"), row.get("model_file_mb")
    return None if anon is None or mapped is None else anon + mapped


def judge(comparison: dict, now: dict[str, dict], old: dict[str, dict]) -> list[dict]:
    """The memory and load verdicts of each compared row (`now` and `old`: rows by the names
    comparison["compared"] pairs), as comparison["holding"]; those beyond the margins also as
    comparison["costlier"], which fails the gate."""
    verdicts = []
    for c in comparison.get("compared", []):
        row, base = now.get(c["row"]), old.get(c.get("baseline_row") or c["row"])
        if row is None or base is None:
            continue
        for kind, value, was, margin, floor, unit in (
                ("memory", model_mb(row), model_mb(base), MEMORY_MARGIN, MEMORY_FLOOR_MB, "MB"),
                ("load", row.get("load_warm_s"), base.get("load_warm_s"), LOAD_MARGIN, LOAD_FLOOR_S, "s")):
            if value is None or was is None:
                continue
            limit = max(was * (1 + margin), was + floor)
            verdicts.append({"row": c["row"], "kind": kind, "now": value, "baseline": was, "limit": limit,
                             "unit": unit, "regressed": value > limit})
    comparison["holding"] = verdicts
    comparison["costlier"] = [v for v in verdicts if v["regressed"]]
    return verdicts


def text(v: dict[str, Any]) -> str:
    """'onnxruntime fp32 batch 1 (tiny.onnx): the model holds 180 MB vs 92.1 MB, limit 108 MB'."""
    what = "the model holds" if v["kind"] == "memory" else "a warm load takes"
    return f"{v['row']}: {what} {v['now']:.4g} {v['unit']} vs {v['baseline']:.4g} {v['unit']}, limit {v['limit']:.4g}"
