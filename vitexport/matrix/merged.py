"""The matrix's one report, built with the bench report and `compare` code: a bench report per device
(`OUT/reports/DEVICE.json`, each one `vitexport compare` reads), merged by `vitexport.report.merge.merge`
into `OUT/matrix-PLAN.{json,csv,md,png,html}`, plus the `matrix` section: every cell with its export's
status and parity, and per model the fastest verified artifact on each device at each batch size.

Every file goes through vitexport.core.writer: complete under a temporary name, then renamed into
place, so an interrupted run or a full disk leaves the previous report or the new one, never half of one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from vitexport.matrix.run import Cell, Matrix

MATRIX_SCHEMA = "vitexport.matrix-report/1"
EXTENSIONS = ("json", "csv", "md", "png", "html")


def stem_for(plan) -> str:
    return "matrix-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", plan.path.stem).strip("_.") or "plan")


def check_writable(out: Path, plan) -> None:
    """Refuse, before any work, to replace report files of that name that the matrix did not write."""
    from vitexport.core import writer

    stem = stem_for(plan)
    for ext in EXTENSIONS:
        writer.check(out / f"{stem}.{ext}", ours=lambda _: _is_ours(out / f"{stem}.json"), inputs=[plan.path])


def _is_ours(path: Path) -> bool:
    from vitexport.core.errors import UsageError
    from vitexport.core.jsonfile import read_json

    if path.is_symlink() or not path.is_file():
        return False
    try:
        data = read_json(path, "matrix report")
    except UsageError:
        return False
    return isinstance(data, dict) and (data.get("matrix") or {}).get("schema") == MATRIX_SCHEMA


def write(matrix: "Matrix", where: str) -> dict[str, Any]:
    """Write the per-device reports and the merged report; return the merged report."""
    from vitexport.core import writer
    from vitexport.report.files import csv_text, html_text, json_text, write_json
    from vitexport.report.merge import merge
    from vitexport.report.plots import can_draw, write_plot

    out, plan = matrix.out, matrix.plan
    check_writable(out, plan)
    device_reports = per_device(matrix)
    paths = []
    for device, rep in device_reports.items():
        paths.append(write_json(rep, out / "reports" / f"{device}.json", [plan.path], flag="--out"))
    merged = merge(paths) if paths else empty_report(plan)
    merged["model"] = plan.name
    merged["matrix"] = section(matrix, where)
    stem = stem_for(plan)
    files = {ext: out / f"{stem}.{ext}" for ext in EXTENSIONS}
    drawn = can_draw()  # without matplotlib the PNG is left out, and the JSON must not list it
    if not drawn:
        del files["png"]
    merged["files"] = {ext: str(p) for ext, p in files.items()}
    parts = {files["csv"]: csv_text(merged), files["md"]: markdown_text(merged)}
    if drawn:
        parts[files["png"]] = lambda tmp: write_plot(labelled(merged), tmp)
    parts[files["html"]] = html_text(merged, files["json"].name)
    parts[files["json"]] = json_text(merged)  # the JSON, which says the files are ours, last
    writer.write_together(parts, ours=lambda _: _is_ours(files["json"]), inputs=[plan.path])
    if not drawn:
        (out / f"{stem}.png").unlink(missing_ok=True)  # an earlier run's plot would contradict these
    return json.loads(json_text(merged))  # as written: NaN and infinities as null


def per_device(matrix: "Matrix") -> dict[str, dict]:
    """One bench report per device that timed something: its rows, machine and settings, and the
    conditions of all its timing runs together (the merged report's `sources` carry them, so the
    matrix's JSON and page say how disturbed the machine was while it timed)."""
    from vitexport.bench.conditions import combine
    from vitexport.bench.stored import SCHEMA

    out: dict[str, dict] = {}
    conditions: dict[str, list] = {}
    for cell in matrix.cells:
        for t in cell.timings:
            rec = t.record or {}
            if not rec.get("rows"):
                continue
            rep = out.get(cell.device)
            if rep is None:
                machine = rec.get("machine") or {}
                rep = out[cell.device] = {
                    "schema": SCHEMA, "model": matrix.plan.name, "label": cell.device, "input_shape": None,
                    "fingerprint": machine.get("fingerprint"), "settings": machine.get("settings"),
                    "roofline": machine.get("roofline"), "results": []}
                for extra in ("roofline_int8", "roofline_cuda"):
                    if machine.get(extra):
                        rep[extra] = machine[extra]
            conditions.setdefault(cell.device, []).append(rec.get("conditions"))
            for row in rec["rows"]:
                rep["results"].append({**row, "model": cell.export.model.label, "target": cell.export.target.label,
                                       "cell": cell.id, "node": rec.get("node"), "cached": t.cached})
    for device, rep in out.items():
        rep["conditions"] = combine(conditions[device])
    return out


def empty_report(plan) -> dict:
    from vitexport.bench.stored import SCHEMA

    return {"schema": SCHEMA, "model": plan.name, "label": None, "merged_from": [], "sources": [],
            "warnings": [], "settings": None, "fingerprint": None, "results": [], "roofline": None}


def section(matrix: "Matrix", where: str) -> dict[str, Any]:
    cells = [cell_dict(c) for c in matrix.cells]
    counts: dict[str, int] = {}
    for c in matrix.cells:
        counts[c.status] = counts.get(c.status, 0) + 1
    return {"schema": MATRIX_SCHEMA, "plan": str(matrix.plan.path), "name": matrix.plan.name, "ran_on": where,
            "out": str(matrix.out), "exit_code": int(matrix.exit_code()), "counts": counts,
            "cached": {"exports": sum(e.cached for e in matrix.exports),
                       "timings": sum(t.cached for c in matrix.cells for t in c.timings),
                       "exports_run": sum(not e.cached and e.record is not None for e in matrix.exports),
                       "timings_run": sum(not t.cached and t.record is not None and t.record.get("ran", True)
                                          for c in matrix.cells
                                          for t in c.timings)},
            "devices": {name: ({"nodes": m.get("nodes")} if "fingerprint" in m else {"unavailable": m.get("reason")})
                        for name, m in matrix.machines.items()},
            "stopped": matrix.stopped, "cells": cells, "fastest": fastest(cells)}


def cell_dict(cell: "Cell") -> dict[str, Any]:
    from vitexport.verify.tasks import task_brief

    e = cell.export
    rec = e.record or {}
    parity = rec.get("parity") or {}
    images = parity.get("images") or {}
    return {
        "id": cell.id, "model": e.model.label, "target": e.target.label, "backend": e.target.backend,
        "precision": rec.get("precision") or getattr(e.target.options, "precision", None),
        "bench_target": cell.bench_target, "device": cell.device, "status": cell.status, "reason": cell.reason,
        "export": {"key": e.key, "status": rec.get("status"), "cached": e.cached, "node": rec.get("node"),
                   "seconds": rec.get("seconds"), "artifact": rec.get("artifact"),
                   "artifact_sha256": rec.get("artifact_sha256"), "provider": rec.get("provider"),
                   "options": rec.get("options") or e.target.options.to_dict()},
        "parity": {**{k: parity.get(k) for k in ("passed", "max_abs_error", "mean_abs_error", "cosine_similarity",
                                                 "top1_agreement", "atol", "rtol")}, **task_brief(parity)}
        if parity else None,
        "images": {k: images.get(k) for k in ("count", "decisive_top1_agreement", "accuracy_drop", "accuracy")}
        if images else None,
        "timings": [{"batch": t.batch, "key": t.key, "cached": t.cached, "node": (t.record or {}).get("node"),
                     "status": (t.record or {}).get("status"), "reason": (t.record or {}).get("reason"),
                     "rows": [_row_brief(r) for r in (t.record or {}).get("rows", [])]} for t in cell.timings],
    }


def _row_brief(row: dict) -> dict:
    lat = row.get("latency_ms") or {}
    return {"batch_size": row.get("batch_size"), "available": row.get("available"), "reason": row.get("reason"),
            "p50_ms": lat.get("p50"), "p90_ms": lat.get("p90"), "throughput_ips": row.get("throughput_ips"),
            "provider": row.get("provider"), "cv": row.get("cv"), "roofline_fraction": row.get("roofline_fraction")}


def fastest(cells: list[dict]) -> list[dict]:
    """Per model, device and batch size: the verified artifact with the lowest p50, and how many
    verified ones it was chosen from. Artifacts not checked here (unchecked) are not candidates."""
    best: dict[tuple, dict] = {}
    for c in cells:
        if c["status"] != "passed":
            continue
        for t in c["timings"]:
            for r in t["rows"]:
                if not r["available"] or r["p50_ms"] is None:
                    continue
                key = (c["model"], c["device"], r["batch_size"])
                entry = best.setdefault(key, {"model": c["model"], "device": c["device"], "batch": r["batch_size"],
                                              "candidates": 0, "best": None})
                entry["candidates"] += 1
                if entry["best"] is None or r["p50_ms"] < entry["best"]["p50_ms"]:
                    entry["best"] = {"target": c["target"], "bench_target": c["bench_target"],
                                     "precision": c["precision"], "artifact": c["export"]["artifact"],
                                     "p50_ms": r["p50_ms"], "throughput_ips": r["throughput_ips"],
                                     "cosine_similarity": (c["parity"] or {}).get("cosine_similarity")}
    return [best[k] for k in sorted(best, key=lambda k: (k[0], k[1], k[2]))]


# ------------------------------------------------------------------------------------------- markdown

def labelled(merged: dict) -> dict:
    """The report with each row's machine label naming its model too: the bench tables and plot label
    rows by machine, backend and precision, which several models share."""
    return {**merged, "results": [{**r, "device_label": f"{r.get('device_label')} · {r.get('model')}"}
                                  for r in merged["results"]]}


def markdown_text(merged: dict) -> str:
    from vitexport.report import files as reports

    m = merged["matrix"]
    lines = [f"# vitexport matrix: {m['name']}", "",
             f"Plan `{Path(m['plan']).name}`, run on {m['ran_on']}: " + ", ".join(
                 f"{n} {status}" for status, n in sorted(m["counts"].items())) + f" (exit {m['exit_code']}).", ""]
    if m.get("stopped"):
        lines += [f"**Ended early:** {m['stopped']['reason']}. The cells marked cancelled did not finish; the cache "
                  "keeps every one that did, and the same command run again does only the rest.", ""]
    if m["fastest"]:
        lines += ["## Fastest verified artifact per model and device", "",
                  "| model | device | batch | fastest | p50 ms | images/s | cosine | of |",
                  "|---|---|---|---|---|---|---|---|"]
        for f in m["fastest"]:
            b = f["best"]
            lines.append(f"| {f['model']} | {f['device']} | {f['batch']} | {b['target']} ({b['bench_target']}) | "
                         f"{b['p50_ms']:.3f} | {b['throughput_ips']:.1f} | {_num(b['cosine_similarity'], 6)} | "
                         f"{f['candidates']} |")
        lines.append("")
    lines += ["## Cells", "", "| model | target | bench | device | status | max abs error | cosine | p50 ms |",
              "|---|---|---|---|---|---|---|---|"]
    for c in m["cells"]:
        p = c["parity"] or {}
        p50 = ", ".join(f"{r['p50_ms']:.3f} (b{r['batch_size']})" for t in c["timings"] for r in t["rows"]
                        if r["available"])
        status = c["status"] + (f": {c['reason']}" if c["reason"] else "")
        lines.append(f"| {c['model']} | {c['target']} | {c['bench_target']} | {c['device']} | "
                     f"{status.replace('|', '/')} | {_num(p.get('max_abs_error'), 3, 'e')} | "
                     f"{_num(p.get('cosine_similarity'), 6)} | {p50} |")
    lines.append("")
    if merged["results"]:
        body = reports.markdown_text(labelled(merged))
        lines += ["#" + line if line.startswith("#") else line for line in body.splitlines()]
    return "\n".join(lines).rstrip() + "\n"


def _num(value, digits: int, kind: str = "f") -> str:
    return "" if value is None else f"{value:.{digits}{kind}}"
