"""Writing a bench report's files side by side: JSON (the report itself), CSV (one flat record per
row, raw numbers), Markdown (the tables with what explains them), the PNG plot and the HTML page, all
replaced together or not at all, and never over a file vitexport did not write."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

from vitexport.bench.stored import check_writable, report_paths
from vitexport.report import tables
from vitexport.report.names import machine_label
from vitexport.report.plots import write_plot
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


def write_json(report: dict, path: Path) -> None:
    Path(path).write_text(json.dumps(json_safe(report), indent=2, default=str, allow_nan=False) + "\n")


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


def write_csv(report: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, restval="")
        writer.writeheader()
        for rec in csv_records(report):
            # Six significant digits: far below timing noise, and readable.
            writer.writerow({k: "" if v is None else float(f"{v:.6g}") if isinstance(v, float) else v
                             for k, v in rec.items()})


def write_markdown(report: dict, path: Path) -> None:
    from vitexport.bench.conditions import describe

    lines = [f"# vitexport bench: {report.get('model') or ''}".rstrip(), ""]
    if report.get("sources"):
        lines += ["Machines:", ""]
        for src in report["sources"]:
            rates = [f"{name} GEMM {r['gflops']:.0f} GFLOP/s" for name, r in
                     (("CPU", src.get("roofline")), ("CPU int8", src.get("roofline_int8")),
                      ("GPU", src.get("roofline_cuda"))) if r and r.get("gflops")]
            cond = describe(src.get("conditions"))
            lines.append(f"- **{src['label']}** ({Path(src['path']).name}): "
                         f"{machine_line(src.get('fingerprint') or {}, src.get('settings'))}"
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
    Path(path).write_text("\n".join(lines).rstrip() + "\n")


def write_html(report: dict, path: Path) -> None:
    from vitexport.report.html import render

    # The page is rendered from the report as its JSON holds it (unknown numbers as null).
    Path(path).write_text(render([(Path(path).name, json_safe(report))]), encoding="utf-8")


def write_all(report: dict, stem: Path, inputs: Iterable[Path] = ()) -> dict[str, str]:
    """Write JSON, CSV, Markdown, PNG and HTML side by side and return their paths. Each is written under
    a temporary name first and renamed into place only when all five are complete: an interrupted run
    leaves the previous set (or nothing), never half a file."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    check_writable(stem, inputs)
    paths = report_paths(stem)
    partial = {ext: p.with_name(f".{p.stem}.{os.getpid()}.partial.{ext}") for ext, p in paths.items()}
    try:
        write_json(report, partial["json"])
        write_csv(report, partial["csv"])
        write_markdown(report, partial["md"])
        drawn = write_plot(report, partial["png"])  # False without matplotlib: the PNG is left out
        write_html(report, partial["html"])
        for ext, p in paths.items():
            if ext == "png" and not drawn:
                p.unlink(missing_ok=True)  # an earlier run's plot would contradict these numbers
                continue
            os.replace(partial[ext], p)
    finally:
        for p in partial.values():
            p.unlink(missing_ok=True)
    return {k: str(v) for k, v in paths.items() if k != "png" or drawn}

