"""The HTML report: one self-contained page (its style, script and charts inline; nothing fetched when
it is viewed) rendered from the report dicts that `--json` prints, for a bench run, a comparison of
machines, a matrix, or several reports of one machine over time (`vitexport report`).

This module says what the page shows, as plain text and numbers; the templates in
vitexport/report/templates/ draw it, and they escape every value (templating.py), so a report's
text reaches the page only as text. The tables are real table markup that reads without the script;
the script only sorts and filters them. `write_page` writes a page whole or not at all, and never
over a file vitexport did not write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from vitexport.core.errors import UsageError
from vitexport.report import devices, page, svg, templating
from vitexport.report.names import machine_label
from vitexport.report.prose import baseline_lines, machine_line, roofline_lines, settings_line, sweep_lines
from vitexport.report.tables import Column, cells, shown

GENERATOR = "vitexport report/1"  # the mark that says a page is ours to replace
FILTERS = ("backend", "precision", "status")  # the lists above each kind of table


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _sort_value(value: Any) -> str:
    """What a cell sorts by: its raw number where it has one, else its text."""
    if isinstance(value, tuple):
        value = value[0]
    if isinstance(value, dict):
        value = value.get("change")
    if isinstance(value, bool) or value is None:
        return ""
    return f"{value:.9g}" if isinstance(value, (int, float)) else str(value)


# ------------------------------------------------------------------------------------------- header

@dataclass
class Line:
    """One line of the header: text, after a name in bold where it has one ("<b>name</b>: text")."""

    text: str
    bold: str | None = None


def _machines(report: dict) -> list[Line]:
    if report.get("sources"):
        return [Line(devices.source_line(s) if s.get("device") else
                     machine_line(s.get("fingerprint") or {}, s.get("settings")), bold=_text(s["label"]))
                for s in report["sources"]]
    if report.get("fingerprint"):
        return [Line(machine_line(report["fingerprint"], report.get("settings")),
                     bold=_text(machine_label(report) or "this machine"))]
    return []


def _conditions(report: dict) -> list[Line]:
    """The state of each machine while it timed (steal, disturbed rounds, the reference kernel's
    drift), on every page with timings: a number means little without it. A machine whose report
    kept none says so."""
    from vitexport.bench.conditions import describe

    if not any(r.get("available") for r in report.get("results", [])):
        return []
    missing = "not recorded (the report keeps no conditions)"
    if report.get("sources"):
        return [Line((devices.source_conditions(s) if s.get("device") else describe(s.get("conditions")))
                     or missing, bold=_text(s["label"])) for s in report["sources"]]
    return [Line(describe(report.get("conditions")) or missing, bold=_text(machine_label(report) or "this machine"))]


def header(title: str, report: dict, extra: Iterable[str] = ()) -> dict[str, Any]:
    """The page's title and its header's items: (name, lines), each name with at least one line."""
    items = [("Machines", _machines(report)), ("Conditions", _conditions(report))]
    if settings_line(report.get("settings") or {}):
        items.append(("Timing", [Line(settings_line(report["settings"]))]))
    items.append(("Notes", [Line(_text(w)) for w in report.get("warnings", [])] + [Line(e) for e in extra]))
    return {"title": title, "items": [(name, lines) for name, lines in items if lines]}


# ------------------------------------------------------------------------------------------- tables

@dataclass
class Row:
    """One table row: the values the filters read, and each cell's text with what it sorts by."""

    cells: list[tuple[str, str]]
    backend: str
    precision: str
    status: str
    fastest: bool = False
    id: str | None = None  # a matrix cell's, so that a link can name it


def _row(pairs: Iterable[tuple[Any, Any]], **attributes: Any) -> Row:
    return Row(cells=[(_text(t), _sort_value(v)) for t, v in pairs], **attributes)


@dataclass
class Table:
    kind: str  # "rows" or "cells": the class its filters and tests find it by
    caption: str
    head: list[str]
    rows: list[Row] = field(default_factory=list)
    prose: tuple[str, ...] = ("task check",)  # columns of sentences: they wrap and read left to right


def _row_status(row: dict, check: dict) -> str:
    # A row that failed on its device did not run as far as the tables go (no speed), but failed is why.
    return check["status"] if row.get("available") or check["status"] == page.FAILED else "unavailable"


def _gate(row: dict) -> str:
    """The row's verdict against the baseline in words: 'regressed: +12.0% (+9.0%..+15.0%)'."""
    vs = row.get("vs_baseline")
    if not vs:
        return ""
    verdict = "regressed" if vs.get("regressed") else vs.get("verdict") or "ok"
    interval = f" ({vs['low']:+.1%}..{vs['high']:+.1%})" if vs.get("low") is not None and vs.get("high") is not None \
        else ""
    return f"{verdict}: {vs['change']:+.1%}{interval}"


# The rows table's own columns; every other column of the report is folded into one "details" cell,
# so that the page fits a 1,400 px window without scrolling sideways.
MAIN_COLUMNS = ("runtime", "p50", "spread", "throughput")


def rows_table(report: dict, group: page.Group, cell_dicts: dict[str, dict]) -> Table:
    columns: list[Column] = shown(report, "markdown")
    main = [i for i, c in enumerate(columns) if c.key in MAIN_COLUMNS]
    # The check has its own column; the device's verdict in words is that column's text.
    folded = [i for i, c in enumerate(columns) if c.key not in MAIN_COLUMNS + ("on_device",)]
    gate = any(r.get("vs_baseline") for r in report.get("results", []))
    # The artifact first (model, target or backend, precision): in a matrix, several models share a
    # device and a backend, and only this tells their rows apart.
    checks = [page.row_check(r, cell_dicts) for r in group.rows]
    # A depth map, a mask or a box is judged on its task's numbers (not top-1): they get a column.
    task = any(c["task"] for c in checks)
    head = ["artifact", "check", "cosine"] + (["task check"] if task else []) + [columns[i].markdown for i in main]
    head += (["gate"] if gate else []) + ["details"]
    table = Table("rows", f"{group.device}, batch {group.batch}: every row, the fastest verified artifact first", head)
    for r, check in zip(group.rows, checks):
        texts = cells(r, columns)
        raw = [c.value(r) if (r.get("available") or c.always) else None for c in columns]
        tds = [(page.row_name(r), page.row_name(r)), (check["words"], check["status"]),
               ("" if check["cosine"] is None else page.cosine_words(check["cosine"]), check["cosine"])]
        if task:
            tds.append((check["task"] or "", check["task"] or ""))
        tds += [(texts[i], raw[i]) for i in main]
        if gate:
            tds.append((_gate(r), (r.get("vs_baseline") or {}).get("change")))
        details = "; ".join(f"{columns[i].markdown}: {texts[i]}" for i in folded if texts[i])
        tds.append((details, details))
        table.rows.append(_row(tds, backend=_text(r.get("target") or r.get("backend")),
                               precision=_text(r.get("precision")), status=_row_status(r, check),
                               fastest=any(r is f for f in group.fastest)))
    return table


def devices_table(report: dict) -> Table | None:
    """Every row of every machine and device in one table, each device's fastest verified row first (and
    marked): the device in words, the runtime, precision, batch, p50, the spread of its rounds, how it
    was checked (on the device, or here by bench) and the device's conditions. None without device rows."""
    from vitexport.report.tables import COLUMNS

    results = report.get("results", [])
    if not any(devices.is_device_row(r) for r in results):
        return None
    keys = ("runtime", "precision", "batch", "p50", "spread", "on_device", "conditions")
    columns = [next(c for c in COLUMNS if c.key == k) for k in keys]
    fastest = {id(f) for g in page.groups(report) for f in g.fastest}
    checks = [page.row_check(r) for r in results]
    task = any(c["task"] for c in checks)  # the device's task numbers, where its model does not classify
    table = Table("devices", "Every machine and device: the fastest verified row of each first",
                  ["device", "artifact"] + [c.markdown for c in columns] + (["task check"] if task else []))
    for r, check in zip(results, checks):
        texts = cells(r, columns)
        if check["status"] == page.FAILED and not r.get("available"):
            texts[keys.index("p50")] = "none: failed"  # why is in its verdict, beside
        raw = [c.value(r) if (r.get("available") or c.always) else None for c in columns]
        tds = [(_text(r.get("device_label")), _text(r.get("device_label"))), (page.row_name(r), page.row_name(r))]
        tds += list(zip(texts, raw))
        if task:
            tds.append((check["task"] or "", check["task"] or ""))
        table.rows.append(_row(tds, backend=_text(r.get("target") or r.get("backend")),
                               precision=_text(r.get("precision")), status=_row_status(r, check),
                               fastest=id(r) in fastest))
    return table


@dataclass
class Fastest:
    name: str
    p50: float
    ips: float | None


@dataclass
class Figure:
    """A latency chart with the table of its points (its text alternative)."""

    metric: str  # "cosine" or "accuracy"
    title: str
    chart: svg.Chart
    points: list[page.Point]
    missing: list[str]  # the points not drawn, for lack of a value


def _figure(group: page.Group, metric: str) -> Figure:
    points = group.charts[metric]
    y_label = "cosine to PyTorch" if metric == "cosine" else "top-1 accuracy on the labelled images"
    title = f"{group.device}, batch {group.batch}: p50 latency vs {y_label}"
    return Figure(metric, title, svg.scatter(points, metric, title), points,
                  [p.label for p in points if p.value is None])


def groups_section(report: dict, heading: str = "Per device and batch size") -> dict[str, Any]:
    """Per device and batch size: the fastest verified artifacts, the table of rows, the charts."""
    cell_dicts = {c["id"]: c for c in (report.get("matrix") or {}).get("cells", [])}
    groups = [{"device": _text(g.device), "batch": _text(g.batch), "table": rows_table(report, g, cell_dicts),
               "fastest": [Fastest(page.row_name(f), f["latency_ms"]["p50"], f.get("throughput_ips"))
                           for f in g.fastest],
               "figures": [_figure(g, m) for m in g.charts]}
              for g in page.groups(report)]
    return {"heading": heading, "groups": groups}


def cells_section(matrix: dict) -> dict[str, Any]:
    """Every cell of a matrix: its status and reason in the terminal's words, and its parity."""
    from vitexport.report.tasks import classifies, task_line

    head = ["model", "target", "device", "status", "reason", "max abs error", "cosine", "p50 ms by batch", "details"]
    table = Table("cells", "Every cell of the matrix", head)
    for c in matrix["cells"]:
        p, im = c.get("parity") or {}, c.get("images") or {}
        # Each p50 with its batch: "56.081 ms at batch 1" and "608.287 ms at batch 8" are not one kind of number.
        p50s = [(r["p50_ms"], r.get("batch_size")) for t in c["timings"] for r in t["rows"]
                if r.get("available") and r.get("p50_ms")]
        cosine = _number(p.get("cosine_similarity"))
        # a classifier's top-1; any other task's own numbers and gates (a depth map's top-1 says nothing)
        judged = ("task", task_line({**p, "precision": c.get("precision")})) if not classifies(p) else \
            ("top-1 agreement", _num(p.get("top1_agreement"), ".3f"))
        details = [("bench", c["bench_target"]), judged,
                   ("atol / rtol", f"{_num(p.get('atol'), 'g')} / {_num(p.get('rtol'), 'g')}" if p else ""),
                   ("images", _num(im.get("count"), "d")), ("accuracy drop", _num(im.get("accuracy_drop"), ".3f"))]
        details_text = "; ".join(f"{name}: {text}" for name, text in details if text)
        vals = [(c["model"], None), (c["target"], None), (c["device"], None),
                (c["status"], None), (c.get("reason") or "", None),
                (_num(p.get("max_abs_error"), ".3e"), p.get("max_abs_error")),
                ("" if cosine is None else page.cosine_words(cosine), cosine),
                (", ".join(f"{v:.3f} (batch {b})" for v, b in p50s), min(v for v, _ in p50s) if p50s else None),
                (details_text, None)]
        table.rows.append(_row(((t, v if v is not None else t) for t, v in vals), backend=_text(c["target"]),
                               precision=_text(c.get("precision")), status=_text(c["status"]), id=_text(c["id"])))
    counts = ", ".join(f"{n} {s}" for s, n in sorted(matrix["counts"].items()))
    return {"count": len(matrix["cells"]), "counts": counts, "exit_code": matrix["exit_code"], "table": table}


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _num(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def notes_section(report: dict) -> list[tuple[str, list[str]]]:
    """The sweep, the baseline and the roofline in sentences: (heading, lines) for each that has any."""
    parts = [("Throughput sweep", sweep_lines(report)),
             ("Against the baseline", baseline_lines(report["baseline"]) if report.get("baseline") else []),
             ("Roofline", roofline_lines(report))]
    return [(title, lines) for title, lines in parts if lines]


@dataclass
class History:
    """One row over time: its chart and the table of its points."""

    name: str
    chart: svg.Chart
    points: list[dict]


def history_section(named: list[tuple[str, dict]]) -> list[History]:
    return [History(s.name, svg.history_chart(s, s.name), s.points) for s in page.history(named)]


# --------------------------------------------------------------------------------------------- page

def profile_context(report: dict) -> dict[str, Any]:
    """`bench --profile`'s section: its rows (none when the report has no profile) and the class legend."""
    from vitexport.report.profiles import legend, profile_rows

    return {"profile_rows": profile_rows(report), "profile_legend": legend()}


def render(named: list[tuple[str, dict]]) -> str:
    """The page for one report (bench, compare or matrix) or several of one machine (history);
    `named` pairs each report with the name it is shown by (its file name)."""
    reports = [r for _, r in named]
    what = page.kind(reports)
    context: dict[str, Any] = {"kind": what, "generator": GENERATOR, "filters": FILTERS, "history": [],
                               "cells": None, "notes": [], "devices": None, **profile_context(reports[0])}
    if what == "history":
        if not page.same_machine(reports):
            raise UsageError("a history page needs bench reports of one machine; to set machines side by side, "
                             "merge them with `vitexport compare` and render the merged report")
        latest = max(named, key=lambda nr: ((nr[1].get("fingerprint") or {}).get("timestamp") or "", nr[0]))[1]
        models = sorted({str(r.get("model")) for r in reports})
        title = f"vitexport history: {', '.join(models)} on {machine_label(latest) or 'one machine'}"
        context.update(header=header(title, latest, [f"{len(reports)} reports: " + ", ".join(n for n, _ in named)]),
                       history=history_section(named), groups=groups_section(latest, "The latest report"),
                       **profile_context(latest))
    elif what == "matrix":
        m = reports[0]["matrix"]
        context.update(header=header(f"vitexport matrix: {m['name']}", reports[0],
                                     [f"Plan {Path(m['plan']).name}, run on {m['ran_on']}."]),
                       groups=groups_section(reports[0]), cells=cells_section(m), notes=notes_section(reports[0]))
    else:
        title = f"vitexport {what}: {reports[0].get('model') or ''}".strip()
        context.update(header=header(title, reports[0]), groups=groups_section(reports[0]),
                       notes=notes_section(reports[0]), devices=devices_table(reports[0]))
    return templating.render("page.html", **context)


def is_ours(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR}">'.encode() in head


def check_page_writable(path: Path, inputs: Iterable[Path] = ()) -> None:
    """Refuse (exit 2) to replace anything but a page vitexport wrote, or one of the given reports."""
    from vitexport.core import writer

    writer.check(path, ours=is_ours, inputs=inputs)


def write_page(named: list[tuple[str, dict]], path: Path, inputs: Iterable[Path] = ()) -> None:
    """Render and write the page whole, through the writer (a temporary name, then renamed into place)."""
    from vitexport.core import writer

    writer.write(path, render(named), ours=is_ours, inputs=inputs)


def default_page(paths: list[Path], joined: bool = False) -> Path:
    """Beside the first report: REPORT.html for one, REPORT-history.html for several (REPORT-compare.html
    for several `joined` into one comparison)."""
    first = Path(paths[0])
    return first.with_suffix(".html") if len(paths) == 1 else \
        first.with_name(f"{first.stem}-{'compare' if joined else 'history'}.html")


def page_from_files(paths: list[Path], out: Path | None = None, read=None) -> dict[str, Any]:
    """`vitexport report`: read each report (every row checked as data, exit 2 naming the file and the
    row), render one page, write it; return what was written. With `read` (device reports among them,
    `vitexport.deploy.joined.loader`), every report is read with it and all are merged into one
    comparison page, as `vitexport compare` merges them."""
    from vitexport.bench.stored import load
    from vitexport.report.merge import merge, ranked_names, ranking

    if not paths:
        raise UsageError("give at least one report (a bench, compare or matrix JSON)")
    # --out is the folder the page goes into, as everywhere, or the page itself (PAGE.html).
    joined = read is not None
    out = default_page(paths, joined) if out is None else Path(out) if Path(out).suffix.lower() in (".html", ".htm") \
        else Path(out) / default_page(paths, joined).name
    check_page_writable(out, paths)
    if read is not None:
        merged = merge(paths, read)
        merged["ranking"] = ranked_names(ranking(merged))
        named = [(str(paths[0]), merged)]
    else:
        named = [(str(p), load(Path(p))) for p in paths]
    if len(named) > 1 and any(r.get("matrix") or r.get("sources") for _, r in named):
        raise UsageError("give one matrix or compare report, or several bench reports of one machine")
    write_page(named, out, paths)
    reports = [r for _, r in named]
    what = page.kind(reports)
    shown = reports if what != "history" else [max(reports, key=lambda r: (r.get("fingerprint") or {})
                                                    .get("timestamp") or "")]
    return {"html": str(out), "kind": what, "reports": [str(p) for p in paths],
            "rows": sum(len(r.get("results", [])) for r in shown),
            "series": len(page.history(named)) if what == "history" else 0}
