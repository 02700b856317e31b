"""Merging bench reports from several machines into one (`vitexport compare`, the matrix), and ranking
its rows fastest first, only ever within one batch size. Device reports join through the reader the
caller passes (`vitexport.deploy.joined.loader`: each judged, then read as the report of one device);
within each device the fastest verified row comes first."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from vitexport.bench.stored import SCHEMA, load
from vitexport.core.errors import UsageError
from vitexport.report.names import machine_label
from vitexport.report.tables import by_batch


def merge(paths: list[Path], read: Callable[[Path], dict] = load) -> dict:
    """One report from several (e.g. one per machine), each read with `read`. Every row is labelled with
    the machine it ran on (`device_label`) and its source file; each machine's fingerprint and settings
    are kept, and a device's facts and verdict."""
    if not paths:
        raise UsageError("give at least one bench report to merge")
    reports = [read(Path(p)) for p in paths]
    base = [machine_label(r, Path(p).stem) for p, r in zip(paths, reports)]
    labels = list(base)
    # Two reports from identical machines must still be told apart in the table and the ranking:
    # by file name where those differ, else by position.
    for i, label in enumerate(base):
        same = [j for j, other in enumerate(base) if other == label]
        if len(same) > 1:
            stems = [Path(paths[j]).stem for j in same]
            labels[i] = f"{label} [{Path(paths[i]).stem}]" if len(set(stems)) == len(stems) \
                else f"{label} [{same.index(i) + 1}]"
    results, sources = [], []
    for path, report, label in zip(paths, reports, labels):
        from vitexport.bench.roofline import REPORT_KEYS

        sources.append({"label": label, "path": str(path), "fingerprint": report.get("fingerprint"),
                        "settings": report.get("settings"), "conditions": report.get("conditions"),
                        **{key: report.get(key) for key in REPORT_KEYS.values()},
                        **({"device": report["device"]} if report.get("device") else {})})
        for r in report["results"]:
            # A row from an already merged report keeps the machine it was measured on.
            results.append({**r, "device_label": r.get("device_label") or label,
                            "source_report": r.get("source_report") or str(path)})
    models = sorted({str(r.get("model")) for r in reports if r.get("model")})
    return {"schema": SCHEMA, "model": " / ".join(models), "label": None, "merged_from": [str(p) for p in paths],
            "sources": sources, "warnings": _merge_warnings(sources, models), "settings": None, "fingerprint": None,
            "results": fastest_verified_first(results), "roofline": None}


merge_reports = merge


def _merge_warnings(sources: list[dict], models: list[str]) -> list[str]:
    warnings = []
    if len(models) > 1:
        warnings.append(f"the reports measured different models ({', '.join(models)})")
    for key, what in (("mode", "timing modes"), ("threads", "thread counts")):
        # A device's check has no bench settings: only bench reports are held to one another here.
        seen = {str((s.get("settings") or {}).get(key)) for s in sources if not s.get("device")}
        if len(seen) > 1:
            warnings.append(f"the reports used different {what}: {', '.join(sorted(seen))}")
    return warnings


def _verified(row: dict) -> bool:
    return (row.get("verification") or {}).get("status") == "verified"


def fastest_verified_first(results: list[dict]) -> list[dict]:
    """The rows of each machine or device together, in the order they first appear; within each, the
    verified rows fastest first, then the other timed rows (PyTorch itself, unverified ones) fastest
    first, then those that did not run (a failed device row among them)."""
    def p50(row: dict) -> float:
        return (row.get("latency_ms") or {}).get("p50") or 0.0

    devices = list(dict.fromkeys(r.get("device_label") for r in results))
    return [r for d in devices for r in sorted((r for r in results if r.get("device_label") == d),
                                               key=lambda r: (not r.get("available"), not _verified(r), p50(r)))]


def ranking(report: dict, *, across_batches: bool = False) -> dict[Any, list[dict]]:
    """Available rows, fastest p50 first, one list per batch size.

    Refuses (UsageError) a single ranking `across_batches` when rows have different batch sizes,
    and refuses a merged report whose sources share no batch size (no machine could be ranked
    against another)."""
    ok = [r for r in report["results"] if r.get("available")]
    batches = sorted({r["batch_size"] for r in ok})
    if across_batches and len(batches) > 1:
        raise UsageError(f"refusing one ranking across different batch sizes ({', '.join(map(str, batches))}): "
                         "latency per call grows with the batch; rank within each batch size")
    sources = sorted({r.get("source_report") for r in ok if r.get("source_report")})
    per_source = [{r["batch_size"] for r in ok if r.get("source_report") == s} for s in sources]
    if len(per_source) > 1 and not set.intersection(*per_source):
        sizes = "; ".join(f"{Path(s).name}: batch {sorted(b)}" for s, b in zip(sources, per_source))
        raise UsageError(f"refusing to rank results measured at different batch sizes ({sizes})")
    return {b: sorted(g, key=lambda r: r["latency_ms"]["p50"])
            for b, g in by_batch(ok)}


def ranked_names(ranks: dict[Any, list[dict]]) -> dict[str, list[str]]:
    """The ranking in words, per batch size: 'Jetson Orin NX, 15 W onnx'; a row whose outputs were not
    judged on its device says so."""
    def name(row: dict) -> str:
        check = row.get("device_check") or {}
        note = f" ({check['verdict']})" if check and check.get("verdict") != "verified on the device" else ""
        return f"{row['device_label']} {row['backend']}{note}"

    return {str(b): [name(r) for r in group] for b, group in ranks.items()}
