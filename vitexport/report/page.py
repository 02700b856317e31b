"""What the HTML report shows, as plain data, read from the same dicts `--json` prints: which kind of
page (one bench run, a comparison of machines, a matrix, or one machine's history), the groups of
rows per device and batch size with the fastest verified artifact first, the points of the latency
vs cosine (and vs accuracy) charts with their Pareto front, and the history series.

Nothing here writes markup: `report.html` renders what this returns, so that what the page says can
be tested without a browser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vitexport.bench.stored import is_merged
from vitexport.report import devices
from vitexport.report.names import machine_label
from vitexport.report.tables import by_batch

# How a row or cell was checked against PyTorch, in the words the terminal uses.
VERIFIED, FAILED, UNVERIFIED, REFERENCE = "verified", "failed", "unverified", "reference"


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


# The kinds of page, each drawn from its own set of reports (tests render every one).
KINDS = ("bench", "compare", "matrix", "history")


def kind(reports: list[dict]) -> str:
    """'matrix', 'compare' (several machines in one report), 'history' (several reports of one
    machine) or 'bench'."""
    if len(reports) > 1:
        return "history"
    only = reports[0]
    if only.get("matrix"):
        return "matrix"
    return "compare" if only.get("sources") or is_merged(only) else "bench"


def same_machine(reports: list[dict]) -> bool:
    """Whether reports were measured on one machine: the same label or CPU, cores, GPUs and OS."""
    def identity(r: dict) -> tuple:
        fp = r.get("fingerprint") or {}
        return (machine_label(r), fp.get("logical_cores"), tuple(fp.get("gpus") or ()), fp.get("os"))

    return not any(r.get("sources") or r.get("matrix") or is_merged(r) for r in reports) and len({identity(r) for r in reports}) == 1


# ------------------------------------------------------------------------------------- verification

def row_check(row: dict, cells: dict[str, dict] | None = None) -> dict[str, Any]:
    """How the artifact a row timed was checked: {"status", "cosine", "accuracy", "words", "task"}. A
    matrix row takes its cell's verdict; a device's row the verdict on its outputs there; a bench row
    the brief bench recorded from the artifact's sidecar. "task" is a non-classifier's numbers and
    gates in words (report.tasks.task_line), None for a classifier."""
    from vitexport.report.tasks import task_line

    if devices.is_device_row(row):
        status = {devices.VERIFIED: VERIFIED, devices.FAILED: FAILED}.get(row["device_check"].get("verdict"),
                                                                          UNVERIFIED)
        brief = row.get("verification") or {}
        return {"status": status, "cosine": _finite(brief.get("cosine_similarity")),
                "accuracy": None, "words": devices.verdict(row), "task": task_line({**brief, **_precision(row)})}
    cell = (cells or {}).get(row.get("cell")) if row.get("cell") else None
    if cell is not None:
        status = {"passed": VERIFIED, "failed": FAILED}.get(cell.get("status"), UNVERIFIED)
        parity = cell.get("parity") or {}
        return {"status": status, "cosine": _finite(parity.get("cosine_similarity")),
                "accuracy": _finite(((cell.get("images") or {}).get("accuracy") or {}).get("candidate")),
                "words": status, "task": task_line({**parity, **_precision(cell)})}
    brief = row.get("verification") or {}
    status = brief.get("status")
    status = {"verified": VERIFIED, "FAILED": FAILED, "reference": REFERENCE}.get(status, UNVERIFIED)
    cosine = 1.0 if status == REFERENCE else _finite(brief.get("cosine_similarity"))
    return {"status": status, "cosine": cosine, "accuracy": _finite(brief.get("accuracy")), "words": status,
            "task": task_line({**brief, **_precision(row)})}


def _precision(row: dict) -> dict:
    """The precision whose gates apply (a row's or a cell's), where it says one."""
    return {"precision": row["precision"]} if isinstance(row.get("precision"), str) else {}


def cosine_words(cosine: float) -> str:
    """A cosine in as many digits as show how far from 1 it is: '0.999825', '1 − 3.3e-13', '1 (exact)'
    (six decimals would print 0.99999999999967 as 1.000000, as if it were PyTorch itself)."""
    if cosine == 1.0:
        return "1 (exact)"
    return f"1 − {1.0 - cosine:.2g}" if 0 < 1.0 - cosine < 1e-5 else f"{cosine:.6f}"


def p50(row: dict) -> float | None:
    return _finite((row.get("latency_ms") or {}).get("p50")) if row.get("available") else None


def row_name(row: dict) -> str:
    """A row in a few words: its target (a matrix) or backend, precision and artifact."""
    what = row.get("target") or row.get("backend") or "?"
    parts = [str(what)]
    if row.get("precision") and str(row["precision"]) not in parts[0]:
        parts.append(str(row["precision"]))
    if row.get("model") and row.get("cell"):
        parts.insert(0, str(row["model"]))
    return " ".join(parts)


# ------------------------------------------------------------------------------------------- groups

@dataclass
class Point:
    """One timed artifact on a chart."""

    key: str  # unique within the page: names the point for hovering and tests
    label: str
    latency: float  # p50 ms
    value: float | None  # cosine or accuracy; None: not drawn (listed as such)
    status: str
    front: bool = False


@dataclass
class Group:
    """The rows of one device at one batch size, fastest verified first."""

    device: str
    batch: Any
    rows: list[dict]
    # Per model, the verified row with the lowest p50 (a matrix compares artifacts of each model,
    # not one model's against another's).
    fastest: list[dict]
    charts: dict[str, list[Point]] = field(default_factory=dict)  # "cosine" / "accuracy" -> points


def groups(report: dict) -> list[Group]:
    cells = {c["id"]: c for c in (report.get("matrix") or {}).get("cells", [])}
    own = machine_label(report) or "this machine"
    by_device: dict[str, list[dict]] = {}
    for r in report.get("results", []):
        by_device.setdefault(r.get("device_label") or own, []).append(r)
    out = []
    for device, rows in by_device.items():
        for batch, group in by_batch(rows):
            checked = [(r, row_check(r, cells)) for r in group]
            best: dict[Any, dict] = {}
            for r, c in checked:
                if c["status"] == VERIFIED and p50(r) is not None:
                    model = r.get("model")
                    if model not in best or p50(r) < p50(best[model]):
                        best[model] = r
            fastest = list(best.values())
            ordered = fastest + [r for r in group if not any(r is f for f in fastest)]
            g = Group(device=device, batch=batch, rows=ordered, fastest=fastest)
            for metric in ("cosine", "accuracy"):
                points = [Point(key=f"{device}|{batch}|{i}", label=row_name(r), latency=p50(r), value=c[metric],
                                status=c["status"]) for i, (r, c) in enumerate(checked) if p50(r) is not None]
                if any(p.value is not None and p.status != REFERENCE for p in points):
                    mark_front(points)
                    g.charts[metric] = points
            out.append(g)
    return out


def mark_front(points: list[Point]) -> None:
    """Mark the Pareto front of the verified points: no other verified point is both faster and at
    least as close (higher value), nor as fast and closer. PyTorch itself is the yardstick the others
    are measured against, not a candidate to ship, so it is never on the front and never hides one."""
    eligible = [p for p in points if p.status == VERIFIED and p.value is not None]
    for p in eligible:
        p.front = not any((q.latency < p.latency and q.value >= p.value) or
                          (q.latency <= p.latency and q.value > p.value) for q in eligible if q is not p)


# ------------------------------------------------------------------------------------------ history

@dataclass
class Series:
    """One row (model, backend, precision, provider, batch) across reports of one machine, oldest first."""

    name: str
    points: list[dict]  # {"when", "p50", "low", "high", "source"}


def history(reports: list[tuple[str, dict]]) -> list[Series]:
    """Each row's p50 per report, ordered by when the report was measured, with the spread of its
    rounds' medians (or p50..p90 where a row kept no rounds): how asv shows a regression."""
    ordered = sorted(reports, key=lambda nr: ((nr[1].get("fingerprint") or {}).get("timestamp") or "", nr[0]))
    series: dict[tuple, Series] = {}
    for name, rep in ordered:
        when = (rep.get("fingerprint") or {}).get("timestamp") or name
        for r in rep.get("results", []):
            mid = p50(r)
            if mid is None:
                continue
            key = (r.get("model"), r.get("backend"), r.get("precision"), r.get("provider"), r.get("batch_size"))
            rounds = [m for m in ((r.get("per_round") or {}).get("median_ms") or []) if _finite(m) is not None]
            low, high = (min(rounds), max(rounds)) if rounds else (mid, _finite(r["latency_ms"].get("p90")) or mid)
            label = f"{r.get('model') or ''} {r.get('backend')} {r.get('precision') or ''} batch {r.get('batch_size')}"
            series.setdefault(key, Series(" ".join(label.split()), [])).points.append(
                {"when": when, "p50": mid, "low": low, "high": high, "source": name})
    return list(series.values())
