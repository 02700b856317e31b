"""Writing a bench report's files side by side: JSON (the report itself), CSV (one flat record per
row, raw numbers), Markdown (the tables with what explains them), the PNG plot and the HTML page, all
replaced together or not at all, and never over a file vitexport did not write."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Iterable

from vitexport.bench.stored import check_writable, report_paths, set_is_ours
from vitexport.core import writer
from vitexport.report import devices, tables
from vitexport.report.names import machine_label
from vitexport.report.plots import can_draw, write_plot
from vitexport.report.prose import baseline_lines, machine_line, roofline_lines, settings_line, sweep_lines
from vitexport.report.tables import CSV_FIELDS, by_batch, table_columns, table_rows


def json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: unknown numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def json_text(report: dict) -> str:
    return json.dumps(json_safe(report), indent=2, default=str, allow_nan=False) + "\n"


def write_json(report: dict, path: Path, inputs: Iterable[Path] = (), flag: str = "--json") -> Path:
    """The report alone at `path` (`bench --json PATH`): only over a JSON report vitexport wrote, never
    over one of `inputs`."""
    return writer.write(path, json_text(report), ours=writer.json_report_is_ours, inputs=inputs, flag=flag)


def csv_records(report: dict) -> list[dict[str, Any]]:
    """One flat record per result with raw numbers; `status` is `ok` or `unavailable: <reason>`."""
    own = machine_label(report)
    out = []
    for r in tables.in_table_order(report):
        # Every record names its machine and model, also in a single-machine report whose rows don't.
        row = {"model": report.get("model"), **r, "device_label": r.get("device_label") or own}
        # tables.COLUMNS looked up now, not imported: the CSV walks the same list as the tables.
        out.append(json_safe({c.csv: c.value(row) for c in tables.COLUMNS
                              if c.csv and (r.get("available") or c.always)}))
    return out


def csv_text(report: dict) -> str:
    text = io.StringIO(newline="")
    table = csv.DictWriter(text, fieldnames=CSV_FIELDS, restval="")
    table.writeheader()
    for rec in csv_records(report):
        # Six significant digits: far below timing noise, and readable.
        table.writerow({k: "" if v is None else float(f"{v:.6g}") if isinstance(v, float) else v
                        for k, v in rec.items()})
    return text.getvalue()


def markdown_text(report: dict) -> str:
    from vitexport.bench.conditions import describe

    lines = [f"# vitexport bench: {report.get('model') or ''}".rstrip(), ""]
    if report.get("sources"):
        lines += ["Machines:", ""]
        for src in report["sources"]:
            rates = [f"{name} GEMM {r['gflops']:.0f} GFLOP/s" for name, r in
                     (("CPU", src.get("roofline")), ("CPU int8", src.get("roofline_int8")),
                      ("GPU", src.get("roofline_cuda"))) if r and r.get("gflops")]
            device = bool(src.get("device"))  # a device report: the device, its package, the verdict
            cond = devices.source_conditions(src) if device else describe(src.get("conditions"))
            what = devices.source_line(src) if device else machine_line(src.get("fingerprint") or {},
                                                                         src.get("settings"))
            lines.append(f"- **{src['label']}** ({Path(src['path']).name}): {what}"
                         + "".join(f"; {r}" for r in rates) + (f"; conditions: {cond}" if cond else ""))
        lines.append("")
    elif report.get("fingerprint"):
        lines += [f"Machine: {machine_line(report['fingerprint'], report.get('settings'))}", ""]
    if settings_line(report.get("settings") or {}):
        lines += [settings_line(report["settings"]), ""]
    if report.get("conditions"):
        lines += [f"Conditions during the run: {describe(report['conditions'])}.", ""]
    for warning in report.get("warnings", []):
        lines += [f"> **Note:** {warning}", ""]
    cols, body = table_columns(report), iter(table_rows(report))
    for batch, group in by_batch(report["results"]):
        lines += [f"## Batch {batch}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in next(body)) + " |" for _ in group]
        lines.append("")
    if report.get("sweeps"):
        lines += ["## Throughput sweep (--batch auto)", ""] + [f"- {line}" for line in sweep_lines(report)] + [""]
    if report.get("baseline"):
        first, *rest = baseline_lines(report["baseline"])
        lines += ["## Against the baseline", "", first, ""] + [f"- {line}" for line in rest] + ([""] if rest else [])
    ranking_ = report.get("ranking")
    if ranking_:
        lines += ["## Ranking (p50, fastest first, within each batch size)", ""]
        lines += [f"- batch {b}: " + " < ".join(names) for b, names in ranking_.items()]
        lines.append("")
    roof = roofline_lines(report)
    if roof:
        lines += ["## Roofline", "", "\"of GEMM\" is model GFLOP × images/s divided by the best rate the row's "
                  "basis reached in this run's rounds (its processor, at its precision).", ""]
        lines += [f"- {line}" for line in roof] + [""]
    return "\n".join(lines).rstrip() + "\n"


def html_text(report: dict, name: str) -> str:
    from vitexport.report.html import render

    # The page is rendered from the report as its JSON holds it (unknown numbers as null).
    return render([(name, json_safe(report))])


def write_all(report: dict, stem: Path, inputs: Iterable[Path] = (), flag: str = "--out") -> dict[str, str]:
    """Write JSON, CSV, Markdown, PNG and HTML side by side and return their paths, through the writer:
    all five complete under temporary names before any is renamed into place (the JSON, which marks
    the set as vitexport's, last), so an interrupted or failed run leaves the previous set whole."""
    stem = Path(stem)
    check_writable(stem, inputs, flag)
    paths = report_paths(stem)
    drawn = can_draw()  # without matplotlib the PNG is left out: the plot repeats the tables
    files = {paths["csv"]: csv_text(report), paths["md"]: markdown_text(report)}
    if drawn:
        files[paths["png"]] = lambda tmp: write_plot(report, tmp)
    files[paths["html"]] = html_text(report, paths["html"].name)
    files[paths["json"]] = json_text(report)
    writer.write_together(files, ours=set_is_ours(stem), inputs=inputs, flag=flag)
    if not drawn:
        paths["png"].unlink(missing_ok=True)  # an earlier run's plot would contradict these numbers
    return {k: str(v) for k, v in paths.items() if k != "png" or drawn}
