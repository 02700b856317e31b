"""The HTML report: one self-contained page (its style, script and charts inline; nothing fetched when
it is viewed) rendered from the report dicts that `--json` prints, for a bench run, a comparison of
machines, a matrix, or several reports of one machine over time (`vitexport report`).

The tables are real table markup that reads without the script; the script only sorts and filters
them. `write_page` writes a page whole or not at all, and never over a file vitexport did not write.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from vitexport.core.errors import UsageError
from vitexport.report import page, svg
from vitexport.report.names import machine_label
from vitexport.report.prose import baseline_lines, machine_line, roofline_lines, settings_line, sweep_lines
from vitexport.report.tables import Column, cells, shown

GENERATOR = "vitexport report/1"  # the mark that says a page is ours to replace


def _asset(name: str) -> str:
    return resources.files("vitexport.report").joinpath("assets", name).read_text()


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


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

def _machines(report: dict) -> list[str]:
    from vitexport.bench.conditions import describe

    if report.get("sources"):
        return [f"<b>{_e(s['label'])}</b>: {_e(machine_line(s.get('fingerprint') or {}, s.get('settings')))}"
                + (f"; conditions: {_e(describe(s.get('conditions')))}" if s.get("conditions") else "")
                for s in report["sources"]]
    if report.get("fingerprint"):
        return [f"<b>{_e(machine_label(report) or 'this machine')}</b>: "
                f"{_e(machine_line(report['fingerprint'], report.get('settings')))}"]
    return []


def _header(title: str, report: dict, extra: Iterable[str] = ()) -> str:
    from vitexport.bench.conditions import describe

    items = [("Machines", _machines(report))]
    if report.get("conditions"):
        items.append(("Conditions", [_e(describe(report["conditions"])) + ": the numbers hold for a machine in "
                                     "this state (steal, reference-kernel drift)."]))
    if settings_line(report.get("settings") or {}):
        items.append(("Timing", [_e(settings_line(report["settings"]))]))
    items.append(("Notes", [_e(w) for w in report.get("warnings", [])] + list(extra)))
    body = "".join(f"<dt>{name}</dt>" + "".join(f"<dd>{line}</dd>" for line in lines)
                   for name, lines in items if lines)
    return f"<header><h1>{_e(title)}</h1><dl>{body}</dl></header>"


# ------------------------------------------------------------------------------------------- tables

def _controls(table_class: str, fields: Iterable[str]) -> str:
    """Filters over every table of `table_class`; the script fills each list from the rows' values."""
    selects = "".join(f'<label>{f} <select data-filter="{f}" data-table="{table_class}"><option value="">all'
                      f'</option></select></label>' for f in fields)
    return (f'<form class="filters" data-table="{table_class}" onsubmit="return false">{selects}'
            f'<output class="shown" data-table="{table_class}" aria-live="polite"></output></form>')


def _th(label: str) -> str:
    return f'<th scope="col" aria-sort="none"><button type="button">{_e(label)}</button></th>'


def _row_status(row: dict, check: dict) -> str:
    return check["status"] if row.get("available") else "unavailable"


def _gate(row: dict) -> str:
    """The row's verdict against the baseline in words: 'regressed: +12.0% (+9.0%..+15.0%)'."""
    vs = row.get("vs_baseline")
    if not vs:
        return ""
    verdict = "regressed" if vs.get("regressed") else vs.get("verdict") or "ok"
    interval = f" ({vs['low']:+.1%}..{vs['high']:+.1%})" if vs.get("low") is not None and vs.get("high") is not None \
        else ""
    return f"{verdict}: {vs['change']:+.1%}{interval}"


def rows_table(report: dict, group: page.Group, cell_dicts: dict[str, dict]) -> str:
    columns: list[Column] = shown(report, "markdown")
    gate = any(r.get("vs_baseline") for r in report.get("results", []))
    # The artifact first (model, target or backend, precision): in a matrix, several models share a
    # device and a backend, and only this tells their rows apart.
    head = ["artifact"] + [c.markdown for c in columns[:1]] + ["check", "cosine"] + [c.markdown for c in columns[1:]]
    head += ["gate"] if gate else []
    body = []
    for r in group.rows:
        check = page.row_check(r, cell_dicts)
        status = _row_status(r, check)
        texts = cells(r, columns)
        raw = [c.value(r) if (r.get("available") or c.always) else None for c in columns]
        tds = [(page.row_name(r), page.row_name(r)), (texts[0], raw[0]), (check["status"], check["status"]),
               ("" if check["cosine"] is None else f"{check['cosine']:.6f}", check["cosine"])]
        tds += list(zip(texts[1:], raw[1:]))
        if gate:
            tds.append((_gate(r), (r.get("vs_baseline") or {}).get("change")))
        first = ' class="fastest"' if any(r is f for f in group.fastest) else ""
        body.append(f'<tr{first} data-backend="{_e(r.get("target") or r.get("backend"))}" '
                    f'data-precision="{_e(r.get("precision"))}" data-status="{_e(status)}">'
                    + "".join(f'<td data-sort="{_e(_sort_value(v))}">{_e(t)}</td>' for t, v in tds) + "</tr>")
    caption = f"{group.device}, batch {group.batch}: every row, the fastest verified artifact first"
    return (f'<div class="scroll"><table class="rows sortable"><caption>{_e(caption)}</caption><thead><tr>'
            + "".join(_th(h) for h in head) + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")


def _fastest_line(group: page.Group) -> str:
    if not group.fastest:
        return '<p class="fastest">No verified artifact was timed here.</p>'
    said = []
    for f in group.fastest:
        p50, ips = f["latency_ms"]["p50"], f.get("throughput_ips")
        said.append(f"<b>{_e(page.row_name(f))}</b>, p50 {p50:.3f} ms" + (f", {ips:.1f} images/s" if ips else ""))
    what = "Fastest verified" + (" per model" if len(said) > 1 else "")
    return f'<p class="fastest">{what}: {"; ".join(said)}.</p>'


def _chart(group: page.Group, metric: str) -> str:
    points = group.charts[metric]
    y_label = "cosine to PyTorch" if metric == "cosine" else "top-1 accuracy on the labelled images"
    title = f"{group.device}, batch {group.batch}: p50 latency vs {y_label}"
    rows = "".join(f'<tr data-key="{_e(p.key)}"><td>{n}</td><td>{_e(p.label)}</td><td>{p.latency:.3f}</td>'
                   f'<td>{"" if p.value is None else f"{p.value:.6f}"}</td><td>{_e(p.status)}</td>'
                   f'<td>{"yes" if p.front else ""}</td></tr>' for n, p in enumerate(points, 1))
    missing = [p.label for p in points if p.value is None]
    note = f"<p>Not drawn (no {metric} recorded): {_e(', '.join(missing))}.</p>" if missing else ""
    return (f'<figure class="scatter" data-metric="{metric}">{svg.scatter(points, y_label, title)}<figcaption>'
            f'{_e(title)}. Filled circle: verified; square: PyTorch itself; cross: failed its check; hollow circle: '
            'not verified; ringed and joined: the Pareto front of verified artifacts (none is both faster and '
            f'closer).</figcaption>{note}<details><summary>The points as a table</summary><table class="points">'
            '<thead><tr><th scope="col">#</th><th scope="col">artifact</th><th scope="col">p50 ms</th>'
            f'<th scope="col">{_e(metric)}</th><th scope="col">check</th><th scope="col">front</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></details></figure>')


def groups_section(report: dict, heading: str = "Per device and batch size") -> str:
    cell_dicts = {c["id"]: c for c in (report.get("matrix") or {}).get("cells", [])}
    parts = [f'<section id="rows"><h2>{_e(heading)}</h2>', _controls("rows", ("backend", "precision", "status"))]
    for g in page.groups(report):
        parts.append(f'<section class="group"><h3>{_e(g.device)} · batch {_e(g.batch)}</h3>{_fastest_line(g)}'
                     + rows_table(report, g, cell_dicts) + "".join(_chart(g, m) for m in g.charts) + "</section>")
    if len(parts) == 2:
        parts.append("<p>No row was timed.</p>")
    return "".join(parts) + "</section>"


def _cells_section(matrix: dict) -> str:
    """Every cell of a matrix: its status and reason in the terminal's words, and its parity."""
    head = ["model", "target", "bench", "device", "status", "reason", "max abs error", "cosine", "top-1 agreement",
            "atol / rtol", "images", "accuracy drop", "p50 ms"]
    body = []
    for c in matrix["cells"]:
        p, im = c.get("parity") or {}, c.get("images") or {}
        p50s = [r["p50_ms"] for t in c["timings"] for r in t["rows"] if r.get("available") and r.get("p50_ms")]
        vals = [(c["model"], None), (c["target"], None), (c["bench_target"], None), (c["device"], None),
                (c["status"], None), (c.get("reason") or "", None),
                (_num(p.get("max_abs_error"), ".3e"), p.get("max_abs_error")),
                (_num(p.get("cosine_similarity"), ".6f"), p.get("cosine_similarity")),
                (_num(p.get("top1_agreement"), ".3f"), p.get("top1_agreement")),
                (f"{_num(p.get('atol'), 'g')} / {_num(p.get('rtol'), 'g')}" if p else "", p.get("atol")),
                (_num(im.get("count"), "d"), im.get("count")),
                (_num(im.get("accuracy_drop"), ".3f"), im.get("accuracy_drop")),
                (", ".join(f"{v:.3f}" for v in p50s), min(p50s) if p50s else None)]
        body.append(f'<tr data-backend="{_e(c["target"])}" data-precision="{_e(c.get("precision"))}" '
                    f'data-status="{_e(c["status"])}" id="cell-{_e(c["id"])}">'
                    + "".join(f'<td data-sort="{_e(_sort_value(v if v is not None else t))}">{_e(t)}</td>'
                              for t, v in vals) + "</tr>")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(matrix["counts"].items()))
    return ('<section id="cells"><h2>Cells</h2>'
            f"<p>{len(matrix['cells'])} cells: {_e(counts)} (exit {matrix['exit_code']}). Each cell's check "
            "against PyTorch, and why it failed or could not run.</p>"
            + _controls("cells", ("backend", "precision", "status"))
            + '<div class="scroll"><table class="cells sortable"><caption>Every cell of the matrix</caption><thead>'
            + "<tr>" + "".join(_th(h) for h in head) + "</tr></thead><tbody>" + "".join(body)
            + "</tbody></table></div></section>")


def _num(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _prose_section(report: dict) -> str:
    parts = []
    for title, lines in (("Throughput sweep", sweep_lines(report)),
                         ("Against the baseline", baseline_lines(report["baseline"]) if report.get("baseline") else []),
                         ("Roofline", roofline_lines(report))):
        if lines:
            parts.append(f"<h2>{title}</h2><ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>")
    return f'<section id="notes">{"".join(parts)}</section>' if parts else ""


def _history_section(named: list[tuple[str, dict]]) -> str:
    parts = ['<section id="history"><h2>History</h2><p>Each row\'s p50 in every report, oldest first; the whisker '
             "spans its rounds' medians (p50 to p90 where a report kept no rounds).</p>"]
    for s in page.history(named):
        rows = "".join(f"<tr><td>{i}</td><td>{_e(p['when'])}</td><td>{_e(p['source'])}</td><td>{p['p50']:.3f}</td>"
                       f"<td>{p['low']:.3f}..{p['high']:.3f}</td></tr>" for i, p in enumerate(s.points, 1))
        parts.append(f'<figure class="history">{svg.history_chart(s, s.name)}<figcaption>{_e(s.name)}</figcaption>'
                     '<table class="points"><thead><tr><th scope="col">#</th><th scope="col">measured</th>'
                     '<th scope="col">report</th><th scope="col">p50 ms</th><th scope="col">spread ms</th></tr>'
                     f"</thead><tbody>{rows}</tbody></table></figure>")
    return "".join(parts) + "</section>"


# --------------------------------------------------------------------------------------------- page

def render(named: list[tuple[str, dict]]) -> str:
    """The page for one report (bench, compare or matrix) or several of one machine (history);
    `named` pairs each report with the name it is shown by (its file name)."""
    reports = [r for _, r in named]
    what = page.kind(reports)
    if what == "history":
        if not page.same_machine(reports):
            raise UsageError("a history page needs bench reports of one machine; to set machines side by side, "
                             "merge them with `vitexport compare` and render the merged report")
        latest = max(named, key=lambda nr: ((nr[1].get("fingerprint") or {}).get("timestamp") or "", nr[0]))[1]
        models = sorted({str(r.get("model")) for r in reports})
        title = f"vitexport history: {', '.join(models)} on {machine_label(latest) or 'one machine'}"
        body = (_header(title, latest, [f"{len(reports)} reports: " + _e(", ".join(n for n, _ in named))])
                + _history_section(named) + groups_section(latest, "The latest report"))
    elif what == "matrix":
        m = reports[0]["matrix"]
        body = (_header(f"vitexport matrix: {m['name']}", reports[0],
                        [_e(f"Plan {Path(m['plan']).name}, run on {m['ran_on']}.")])
                + groups_section(reports[0]) + _cells_section(m) + _prose_section(reports[0]))
        title = f"vitexport matrix: {m['name']}"
    else:
        title = f"vitexport {what}: {reports[0].get('model') or ''}".strip()
        body = _header(title, reports[0]) + groups_section(reports[0]) + _prose_section(reports[0])
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="{GENERATOR}"><title>{_e(title)}</title>'
            f"<style>{_asset('report.css')}</style></head><body><main>{body}</main>"
            f"<footer>Written by vitexport from the report's JSON; every number here is in it.</footer>"
            f"<script>{_asset('report.js')}</script></body></html>\n")


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


def default_page(paths: list[Path]) -> Path:
    """Beside the first report: REPORT.html for one, REPORT-history.html for several."""
    first = Path(paths[0])
    return first.with_suffix(".html") if len(paths) == 1 else first.with_name(f"{first.stem}-history.html")


def page_from_files(paths: list[Path], out: Path | None = None) -> dict[str, Any]:
    """`vitexport report`: read each report (every row checked as data, exit 2 naming the file and the
    row), render one page, write it; return what was written."""
    from vitexport.bench.stored import load

    if not paths:
        raise UsageError("give at least one report (a bench, compare or matrix JSON)")
    out = Path(out) if out is not None else default_page(paths)
    if out.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--out {out}: the page's name must end in .html")
    check_page_writable(out, paths)
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
