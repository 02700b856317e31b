"""Benchmark reports: one table for people, JSON/CSV for machines, a plot; merging across machines."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .errors import UsageError

SCHEMA = "vitexport.bench/1"
COLUMNS = ("device", "backend", "provider", "precision", "batch", "p50 ms", "p90 ms", "p99 ms", "mean ± std ms",
           "images/s", "load s", "first ms", "artifact MB", "peak MB", "CV")


def _num(value, digits=1):
    return "" if value is None else f"{value:.{digits}f}"


def rows(report: dict) -> list[list[str]]:
    """Table rows; a backend that could not run stays in the table with its reason."""
    out = []
    for r in report["results"]:
        device = r.get("device_label", "")
        if not r.get("available"):
            out.append([device, r["backend"], "", r.get("precision", ""), str(r.get("batch_size", "")),
                        f"unavailable: {r.get('reason')}"] + [""] * (len(COLUMNS) - 6))
            continue
        lat = r["latency_ms"]
        cv = f"{r['cv']:.3f}" + (" unstable" if r.get("unstable") else "")
        out.append([device, r["backend"], r.get("provider", ""), r.get("precision", ""), str(r["batch_size"]),
                    _num(lat["p50"], 2), _num(lat["p90"], 2), _num(lat["p99"], 2),
                    f"{lat['mean']:.2f} ± {lat['std']:.2f}", _num(r["throughput_ips"]), _num(r.get("load_s"), 2),
                    _num(r.get("first_inference_ms")), _num((r.get("artifact_bytes") or 0) / 1e6 or None),
                    _num(r.get("peak_rss_mb")), cv])
    return out


def rich_table(report: dict, title: str = "vitexport bench"):
    """The terminal table: the columns people compare; unavailable rows keep their reason."""
    from rich import box
    from rich.table import Table

    merged = any(r.get("device_label") for r in report["results"])
    table = Table(title=title, caption="latency in ms (p50, p99, mean±sd, 1st inference), load in s",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    # Short headers keep the table inside 80 columns; times are ms except load (s).
    columns = (["device"] if merged else []) + ["backend", "batch", "p50", "p99", "mean±sd", "img/s", "load s",
                                                "1st", "CV"]
    for c in columns:
        table.add_column(c, justify="left" if c in ("device", "backend") else "right", no_wrap=True)
    for r in report["results"]:
        head = ([r.get("device_label", "")] if merged else [])
        if not r.get("available"):
            table.add_row(*head, r["backend"], str(r["batch_size"]), "[dim]n/a[/dim]", *[""] * (len(columns) - len(head) - 3))
            continue
        lat = r["latency_ms"]
        provider = (r.get("provider") or "")
        shown = f"{r['backend']} ({provider.replace('ExecutionProvider', '')})" if "ExecutionProvider" in provider \
            else r["backend"]
        table.add_row(*head, shown, str(r["batch_size"]), f"{lat['p50']:.1f}",
                      f"{lat['p99']:.1f}", f"{lat['mean']:.1f}±{lat['std']:.1f}", f"{r['throughput_ips']:.1f}",
                      _num(r.get("load_s"), 2), _num(r.get("first_inference_ms")),
                      f"{r['cv']:.2f}" + (" [red]unstable[/red]" if r.get("unstable") else ""))
    return table


def unavailable(report: dict) -> list[str]:
    """One line per backend that could not run, with its reason (the table only says n/a)."""
    seen: dict[str, str] = {}
    for r in report["results"]:
        if not r.get("available"):
            key = f"{r.get('device_label', '')} {r['backend']}".strip()
            seen.setdefault(key, r.get("reason") or "unknown")
    return [f"{name} unavailable: {reason}" for name, reason in seen.items()]


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def write_csv(report: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(rows(report))


def write_markdown(report: dict, path: Path) -> None:
    fp = report.get("fingerprint", {})
    lines = [f"# vitexport bench: {report.get('model', '')}", "",
             f"Machine: {fp.get('cpu', '?')}, {fp.get('usable_cores', '?')} cores, GPU: {', '.join(fp.get('gpus', []))}, "
             f"{fp.get('os', '')}, Python {fp.get('python', '')}; threads {report.get('settings', {}).get('threads')}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(report)]
    roof = report.get("roofline")
    if roof:
        lines += ["", f"Roofline: ONNX Runtime runs one {roof['n']}³ MatMul at {roof['gflops']:.0f} GFLOP/s on this "
                      f"machine; `roofline_fraction` in the JSON states each result as a share of it."]
    path.write_text("\n".join(lines) + "\n")


def write_plot(report: dict, path: Path) -> None:
    """p50 latency per backend with p90/p99 whiskers, one panel per batch size, plus throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in report["results"] if r.get("available")]
    batches = sorted({r["batch_size"] for r in ok}) or [0]
    fig, axes = plt.subplots(2, len(batches), figsize=(4.5 * len(batches) + 1, 7), squeeze=False)
    for col, batch in enumerate(batches):
        group = [r for r in ok if r["batch_size"] == batch]
        labels = [f"{r.get('device_label', '')} {r['backend']}".strip() for r in group]
        p50 = [r["latency_ms"]["p50"] for r in group]
        ax = axes[0][col]
        ax.barh(labels, p50, color="#4c72b0")
        for y, r in enumerate(group):
            ax.plot([r["latency_ms"]["p90"], r["latency_ms"]["p99"]], [y, y], "k|-", markersize=10)
        ax.set_title(f"batch {batch}: p50 latency (bars), p90 to p99 (whisker)")
        ax.set_xlabel("ms")
        axes[1][col].barh(labels, [r["throughput_ips"] for r in group], color="#55a868")
        axes[1][col].set_xlabel("images / s")
    fig.suptitle(f"vitexport bench: {report.get('model', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(report: dict, stem: Path) -> dict[str, str]:
    """Write JSON, CSV, Markdown and PNG next to each other; return their paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = {ext: stem.with_suffix(f".{ext}") for ext in ("json", "csv", "md", "png")}
    write_json(report, paths["json"])
    write_csv(report, paths["csv"])
    write_markdown(report, paths["md"])
    write_plot(report, paths["png"])
    return {k: str(v) for k, v in paths.items()}


def load(path: Path) -> dict:
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read bench report {path}: {e}") from None
    if report.get("schema") != SCHEMA:
        raise UsageError(f"{path} is not a vitexport bench report (schema {report.get('schema')!r})")
    return report


def merge(paths: list[Path]) -> dict:
    """One report from several machines; each row is labelled with the machine it ran on."""
    reports = [load(p) for p in paths]
    results = []
    for path, report in zip(paths, reports):
        fp = report.get("fingerprint", {})
        gpu = ", ".join(g for g in fp.get("gpus", []) if g != "none")
        label = report.get("label") or gpu or fp.get("cpu") or Path(path).stem
        for r in report["results"]:
            results.append({**r, "device_label": label, "source_report": str(path)})
    return {"schema": SCHEMA, "model": " / ".join(sorted({r.get("model", "") for r in reports})),
            "merged_from": [str(p) for p in paths], "fingerprints": [r.get("fingerprint") for r in reports],
            "results": results}


def ranking(report: dict) -> dict[int, list[dict]]:
    """Fastest first, within each batch size only: latency at batch 1 and batch 8 do not compare.

    Refuses (UsageError) when no batch size is shared by every source report, since then no two
    machines can be ranked against each other at all."""
    ok = [r for r in report["results"] if r.get("available")]
    sources = {r.get("source_report") for r in ok}
    per_source = [{r["batch_size"] for r in ok if r.get("source_report") == s} for s in sources]
    if len(per_source) > 1 and not set.intersection(*per_source):
        sizes = "; ".join(f"{s}: batch {sorted(b)}" for s, b in zip(sources, per_source))
        raise UsageError(f"refusing to rank results measured at different batch sizes ({sizes})")
    groups: dict[int, list[dict]] = {}
    for r in ok:
        groups.setdefault(r["batch_size"], []).append(r)
    return {b: sorted(g, key=lambda r: r["latency_ms"]["p50"]) for b, g in sorted(groups.items())}
