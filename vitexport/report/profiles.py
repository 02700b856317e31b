"""`bench --profile` in a report: one line per profiled row under the terminal table, and the
per-class bars and top operators the HTML page draws for each row."""

from __future__ import annotations

from typing import Any

from vitexport.bench.opclasses import CLASSES
from vitexport.bench.profile import accounted_note, one_line

# One colour per class, the same on every page (the stacked bars and their legend).
COLOURS = {"matmul": "#4c78a8", "attention": "#f58518", "norm": "#54a24b", "activation": "#b279a2",
           "quantize": "#e45756", "layout": "#72b7b2", "other": "#9d9d9d"}


def row_name(row: dict) -> str:
    return f"{row['backend']} {row.get('precision', 'fp32')} batch {row['batch_size']}"


def profile_lines(report: dict) -> list[str]:
    """`NAME: breakdown` for each row that was profiled (or says why it could not be)."""
    return [f"{row_name(r)}: {one_line(r['profile'])}" for r in report.get("results") or [] if r.get("profile")]


def profile_rows(report: dict) -> list[dict[str, Any]]:
    """What the page shows of each profiled row: its name, the classes as bar segments (share of the
    profiled total, for the widths), the top operators, what the profiler accounts for, or why none."""
    out = []
    for r in report.get("results") or []:
        profile = r.get("profile")
        if not profile:
            continue
        if not profile.get("available"):
            out.append({"name": row_name(r), "reason": profile.get("reason") or "unknown"})
            continue
        total = profile["total_ms"] or 0.0
        segments, x = [], 0.0
        for c in profile["classes"]:
            if c["ms"] <= 0:
                continue
            width = 100.0 * c["ms"] / total if total else 0.0
            segments.append({"class": c["class"], "label": c["label"], "ms": c["ms"], "share": c["share"],
                             "x": x, "width": width, "colour": COLOURS.get(c["class"], COLOURS["other"])})
            x += width
        out.append({"name": row_name(r), "runtime": profile["runtime"], "segments": segments, "top": profile["top"],
                    "total_ms": total, "p50_ms": profile.get("p50_ms"), "accounted": profile.get("accounted"),
                    "runs": profile["runs"], "note": accounted_note(profile)})
    return out


def legend() -> list[dict[str, str]]:
    return [{"class": cls, "label": label, "colour": COLOURS[cls]} for cls, label in CLASSES.items()]
