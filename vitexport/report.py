"""Benchmark reports: a table for people, JSON and CSV for machines, a plot; merging across machines.

A report is a dict (schema `SCHEMA`):
    {"schema", "model", "label", "fingerprint", "settings", "results": [row, ...], "roofline"}
with one row per backend x batch size. A row that could not run keeps `available: False` and its
`reason`, and every output shows it as `unavailable: <reason>`: a missing row would read as
"not tried". Tables are grouped by batch size, and rankings never mix batch sizes: latency per call
at batch 1 and at batch 8 measure different things.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable

from .errors import UsageError

SCHEMA = "vitexport.bench/1"

# Machine-readable columns: raw numbers, no units in cells.
CSV_FIELDS = ("device", "model", "backend", "provider", "precision", "batch_size", "status", "p50_ms", "p90_ms",
              "p99_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "throughput_ips", "cv", "unstable", "iterations",
              "load_s", "first_inference_ms", "artifact_mb", "peak_rss_mb", "peak_gpu_mb", "roofline_fraction",
              "roofline_basis")


# ---------------------------------------------------------------------------------------------- helpers

def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value:.{digits}f}"


def _mb(nbytes: Any) -> float | None:
    return nbytes / 1e6 if nbytes else None


def _provider(row: dict) -> str:
    return (row.get("provider") or "").replace("ExecutionProvider", "")


def _batch_key(row: dict) -> tuple:
    b = row.get("batch_size")
    return (b is None, b if isinstance(b, int) else 0)


def by_batch(results: Iterable[dict]) -> list[tuple[Any, list[dict]]]:
    """Rows grouped by batch size, ascending; order within a group is kept."""
    groups: dict[Any, list[dict]] = {}
    for r in sorted(results, key=_batch_key):  # sorted() is stable
        groups.setdefault(r.get("batch_size"), []).append(r)
    return list(groups.items())


def is_merged(report: dict) -> bool:
    return any(r.get("device_label") for r in report.get("results", []))


def short_cpu(name: str) -> str:
    """'Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz' -> 'Intel Xeon Gold 6130': a table label, not a spec."""
    name = re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|\b\d+-Core\b|@\s*[\d.]+\s*GHz", " ", name)
    return " ".join(name.split())


def machine_label(report: dict, fallback: str = "") -> str:
    """A short name for the machine a report came from: its --label, its GPUs, else its CPU."""
    fp = report.get("fingerprint") or {}
    gpu = ", ".join(g for g in fp.get("gpus", []) if g and g != "none")
    return report.get("label") or gpu or short_cpu(fp.get("cpu") or "") or fallback


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: unknown numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ table rows

def _show_gpu(report: dict) -> bool:
    return any(r.get("peak_gpu_mb") for r in report["results"])


def roofline_fraction(row: dict) -> float | None:
    """The row's share of its GEMM rate. Rows written before `roofline_basis` existed compared GPU
    runs with the CPU's rate; those fractions are not shown."""
    frac = row.get("roofline_fraction")
    if not isinstance(frac, (int, float)) or not math.isfinite(frac):
        return None
    if "roofline_basis" not in row:
        from .roofline import basis

        if basis(row.get("provider")) != "cpu":
            return None
    return float(frac)


def _show_roofline(report: dict) -> bool:
    return any(roofline_fraction(r) is not None for r in report["results"])


def table_columns(report: dict) -> list[str]:
    cols = (["device"] if is_merged(report) else []) + [
        "backend", "provider", "precision", "batch", "p50 ms", "p90 ms", "p99 ms", "mean ± std ms", "images/s",
        "load s", "first ms", "artifact MB", "peak RSS MB"]
    if _show_gpu(report):
        cols.append("peak GPU MB")
    cols.append("CV")
    if _show_roofline(report):
        cols.append("of GEMM")
    return cols


def table_rows(report: dict) -> list[list[str]]:
    """Display rows in `table_columns` order, grouped by batch size; an unavailable backend keeps
    its row with `unavailable: <reason>` where its numbers would be."""
    cols = table_columns(report)
    merged, gpu, roof = is_merged(report), _show_gpu(report), _show_roofline(report)
    out = []
    for _, group in by_batch(report["results"]):
        for r in group:
            head = ([r.get("device_label", "")] if merged else []) + [
                r.get("backend", ""), _provider(r), r.get("precision") or "", str(r.get("batch_size", ""))]
            if not r.get("available"):
                out.append(head + [f"unavailable: {r.get('reason') or 'unknown'}"] + [""] * (len(cols) - len(head) - 1))
                continue
            lat = r["latency_ms"]
            cv = _f(r.get("cv"), 3) + (" unstable" if r.get("unstable") else "")
            cells = [_f(lat["p50"], 2), _f(lat["p90"], 2), _f(lat["p99"], 2),
                     f"{lat['mean']:.2f} ± {lat['std']:.2f}", _f(r.get("throughput_ips")), _f(r.get("load_s"), 2),
                     _f(r.get("first_inference_ms")), _f(_mb(r.get("artifact_bytes"))), _f(r.get("peak_rss_mb"))]
            if gpu:
                cells.append(_f(r.get("peak_gpu_mb")))
            cells.append(cv)
            if roof:
                frac = roofline_fraction(r)
                cells.append(f"{frac:.0%}" if isinstance(frac, (int, float)) and math.isfinite(frac) else "")
            out.append(head + cells)
    return out


def rows(report: dict) -> list[list[str]]:
    """Alias of `table_rows`, kept for callers of the first version."""
    return table_rows(report)


def _sig(value: Any) -> str:
    """Compact number for the terminal: about three significant digits."""
    if value is None or not math.isfinite(value):
        return ""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def rich_table(report: dict, title: str = "vitexport bench"):
    """The terminal table: the Markdown table's columns in compact form, one section per batch size.
    An unavailable backend keeps its row, with `unavailable: <reason>` under its name."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    merged, gpu, roof = is_merged(report), _show_gpu(report), _show_roofline(report)
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0),
                  caption="ms: p50 p90 p99 mean±sd, 1st = first inference; load in s; file, RSS, GPU in MB "
                          "(10^6 bytes); CV = std/mean; roof = share of the measured GEMM rate")
    if merged:
        table.add_column("device", min_width=10, max_width=24, overflow="fold")
    table.add_column("backend", min_width=12, max_width=28, overflow="fold")
    for name in ("prec", "batch", "p50", "p90", "p99", "mean±sd", "img/s", "load", "1st", "file", "RSS") + \
            (("GPU",) if gpu else ()):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("CV", justify="right", no_wrap=True)
    if roof:
        table.add_column("roof", justify="right", no_wrap=True)
    groups = by_batch(report["results"])
    for i, (_, group) in enumerate(groups):
        for r in group:
            name = escape(str(r.get("backend", "")))
            provider = _provider(r)
            if provider and provider not in ("torch-cpu", "torch-cuda") and provider.lower() not in name.lower():
                name += f" ({escape(provider)})"
            head = ([escape(str(r.get("device_label", "")))] if merged else []) + [name]
            tail = [escape(str(r.get("precision") or "")), str(r.get("batch_size", ""))]
            if not r.get("available"):
                # Shortened here to keep the table readable; `unavailable()` gives the whole reason.
                reason = _shorten(f"unavailable: {r.get('reason') or 'unknown'}", 72)
                head[-1] += f"\n[dim]{escape(reason)}[/dim]"
                table.add_row(*head, *tail, "[dim]n/a[/dim]")
                continue
            lat = r["latency_ms"]
            cells = [_sig(lat["p50"]), _sig(lat["p90"]), _sig(lat["p99"]), f"{_sig(lat['mean'])}±{_sig(lat['std'])}",
                     _sig(r.get("throughput_ips")), _f(r.get("load_s"), 2), _sig(r.get("first_inference_ms")),
                     _sig(_mb(r.get("artifact_bytes"))), _sig(r.get("peak_rss_mb"))]
            if gpu:
                cells.append(_sig(r.get("peak_gpu_mb")))
            if r.get("unstable"):
                head[-1] += f"\n[red]unstable: CV {r['cv']:.2f} > {r.get('unstable_cv', 0.1):.2f}[/red]"
            cells.append(f"[red]{_f(r.get('cv'), 2)}[/red]" if r.get("unstable") else _f(r.get("cv"), 2))
            if roof:
                frac = roofline_fraction(r)
                cells.append(f"{frac:.0%}" if isinstance(frac, (int, float)) and math.isfinite(frac) else "")
            table.add_row(*head, *tail, *cells)
        if i < len(groups) - 1:
            table.add_section()
    return table


def unavailable(report: dict) -> list[str]:
    """One line per backend that could not run, with its reason."""
    seen: dict[str, str] = {}
    for r in report["results"]:
        if not r.get("available"):
            key = f"{r.get('device_label', '')} {r['backend']}".strip()
            seen.setdefault(key, r.get("reason") or "unknown")
    return [f"{name} unavailable: {reason}" for name, reason in seen.items()]


# ------------------------------------------------------------------------------------------------ files

def write_json(report: dict, path: Path) -> None:
    Path(path).write_text(json.dumps(_clean(report), indent=2, default=str, allow_nan=False) + "\n")


def csv_records(report: dict) -> list[dict[str, Any]]:
    """One flat record per result with raw numbers; `status` is `ok` or `unavailable: <reason>`."""
    own = machine_label(report)
    out = []
    for _, group in by_batch(report["results"]):
        for r in group:
            rec: dict[str, Any] = {"device": r.get("device_label") or own, "model": r.get("model", report.get("model")),
                                   "backend": r.get("backend"), "provider": r.get("provider"),
                                   "precision": r.get("precision"), "batch_size": r.get("batch_size")}
            if not r.get("available"):
                rec["status"] = f"unavailable: {r.get('reason') or 'unknown'}"
            else:
                lat = r["latency_ms"]
                rec.update(status="ok", **{f"{k}_ms": lat.get(k) for k in ("p50", "p90", "p99", "mean", "std", "min",
                                                                              "max")},
                           throughput_ips=r.get("throughput_ips"), cv=r.get("cv"), unstable=r.get("unstable"),
                           iterations=r.get("iterations"), load_s=r.get("load_s"),
                           first_inference_ms=r.get("first_inference_ms"), artifact_mb=_mb(r.get("artifact_bytes")),
                           peak_rss_mb=r.get("peak_rss_mb"), peak_gpu_mb=r.get("peak_gpu_mb"),
                           roofline_fraction=roofline_fraction(r),
                           roofline_basis=r.get("roofline_basis") if roofline_fraction(r) is not None else None)
            out.append(_clean(rec))
    return out


def write_csv(report: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, restval="")
        writer.writeheader()
        for rec in csv_records(report):
            # Six significant digits: far below timing noise, and readable.
            writer.writerow({k: "" if v is None else float(f"{v:.6g}") if isinstance(v, float) else v
                             for k, v in rec.items()})


def _machine_line(fp: dict, settings: dict | None) -> str:
    usable = fp.get("usable_cores") or fp.get("logical_cores") or "?"
    cores = f"{fp.get('physical_cores') or '?'} physical / {usable} usable cores"
    libs = ", ".join(f"{k} {v}" for k, v in (fp.get("libraries") or {}).items())
    threads = (settings or {}).get("threads", fp.get("threads"))
    return (f"{fp.get('cpu', '?')} ({cores}); GPU: {', '.join(fp.get('gpus') or ['none'])}; {fp.get('os', '?')}; "
            f"Python {fp.get('python', '?')}; threads {threads}" + (f"; {libs}" if libs else "")
            + (f"; measured {fp['timestamp']}" if fp.get("timestamp") else ""))


def _settings_line(settings: dict) -> str:
    if not settings:
        return ""
    stop = f"{settings['iters']} timed runs" if settings.get("iters") else f"{settings.get('budget_s')} s of timed runs"
    return (f"Warm-up: at least {settings.get('warmup_iters')} runs and {settings.get('warmup_s')} s; then {stop}. "
            f"Mode: {settings.get('mode', '?')}.")


def write_markdown(report: dict, path: Path) -> None:
    lines = [f"# vitexport bench: {report.get('model') or ''}".rstrip(), ""]
    if report.get("sources"):
        lines += ["Machines:", ""]
        for src in report["sources"]:
            rates = [f"{name} GEMM {r['gflops']:.0f} GFLOP/s" for name, r in
                     (("CPU", src.get("roofline")), ("GPU", src.get("roofline_cuda"))) if r and r.get("gflops")]
            lines.append(f"- **{src['label']}** ({Path(src['path']).name}): "
                         f"{_machine_line(src.get('fingerprint') or {}, src.get('settings'))}"
                         + "".join(f"; {r}" for r in rates))
        lines.append("")
    elif report.get("fingerprint"):
        lines += [f"Machine: {_machine_line(report['fingerprint'], report.get('settings'))}", ""]
    if _settings_line(report.get("settings") or {}):
        lines += [_settings_line(report["settings"]), ""]
    for warning in report.get("warnings", []):
        lines += [f"> **Note:** {warning}", ""]
    cols, body = table_columns(report), iter(table_rows(report))
    for batch, group in by_batch(report["results"]):
        lines += [f"## Batch {batch}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in next(body)) + " |" for _ in group]
        lines.append("")
    ranking_ = report.get("ranking")
    if ranking_:
        lines += ["## Ranking (p50, fastest first, within each batch size)", ""]
        lines += [f"- batch {b}: " + " < ".join(names) for b, names in ranking_.items()]
        lines.append("")
    roof, cuda = report.get("roofline"), report.get("roofline_cuda")
    if roof:
        lines += [f"Roofline: ONNX Runtime runs one {roof['n']}³ float32 MatMul at {roof['gflops']:.0f} GFLOP/s on "
                  f"this machine's CPU (median run {roof.get('gflops_median', roof['gflops']):.0f}); "
                  f"\"of GEMM\" is model GFLOP × images/s divided by the rate of the processor a row ran on.", ""]
    if cuda:
        lines += [f"GPU roofline: torch.matmul, {cuda['n']}³ {cuda.get('dtype', 'float32')}, reaches "
                  f"{cuda['gflops']:.0f} GFLOP/s on {cuda.get('device', 'the GPU')}.", ""]
    Path(path).write_text("\n".join(lines).rstrip() + "\n")


def write_plot(report: dict, path: Path) -> None:
    """One row of panels per batch size: latency (dot at p50, thick bar to p90, whisker to p99) and
    throughput. Unavailable backends keep their line, labelled with the reason, so the plot shows
    everything that was tried; unstable rows are drawn in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_batch(report["results"]) or [(None, [])]
    sizes = [max(len(g), 1) for _, g in groups]
    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 1.3 * len(groups) + 0.45 * sum(sizes) + 0.6),
                             squeeze=False, gridspec_kw={"height_ratios": [n + 2 for n in sizes]})
    for (batch, group), (lat_ax, ips_ax) in zip(groups, axes):
        labels = [" ".join(str(x) for x in (r.get("device_label"), r.get("backend"), r.get("precision")) if x)
                  for r in group]
        ys = list(range(len(group)))[::-1]  # first row on top
        ok = [r for r in group if r.get("available")]
        lows = [r["latency_ms"]["min"] for r in ok if r["latency_ms"].get("min")]
        # A GPU and a CPU in one merged plot differ by orders of magnitude: log scale then.
        log = bool(lows) and max(r["latency_ms"]["p99"] for r in ok) / max(min(lows), 1e-9) > 20
        top = max([r["latency_ms"]["p99"] for r in ok] or [1.0])
        ips_top = max([r.get("throughput_ips") or 0 for r in ok] or [1.0])
        for y, r in zip(ys, group):
            if not r.get("available"):
                note = _shorten(f"unavailable: {r.get('reason') or 'unknown'}", 60)
                for ax in (lat_ax, ips_ax):
                    ax.text(0.01, y, note, va="center", color="0.4", fontsize=8,
                            transform=ax.get_yaxis_transform())
                continue
            lat = r["latency_ms"]
            color = "#c44e52" if r.get("unstable") else "#4c72b0"
            lat_ax.plot([lat["p50"], lat["p99"]], [y, y], color=color, lw=1)
            lat_ax.plot([lat["p50"], lat["p90"]], [y, y], color=color, lw=6, alpha=0.45, solid_capstyle="butt")
            lat_ax.plot([lat["p99"]], [y], "|", color=color, markersize=12)
            lat_ax.plot([lat["p50"]], [y], "o", color=color)
            lat_ax.annotate(f"{lat['p50']:.3g} ms" + (" (unstable)" if r.get("unstable") else ""),
                            (lat["p99"], y), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                            color=color)
            ips = r.get("throughput_ips") or 0
            ips_ax.barh(y, ips, color="#55a868", height=0.6)
            frac = roofline_fraction(r)
            note = f"{ips:.3g}/s" + (f", {frac:.0%} of GEMM" if isinstance(frac, float) and math.isfinite(frac) else "")
            ips_ax.annotate(note, (ips, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
        lat_ax.set_yticks(ys, labels)
        ips_ax.set_yticks(ys, [""] * len(ys))
        for ax in (lat_ax, ips_ax):
            ax.set_ylim(-0.7, len(group) - 0.3)
            ax.grid(axis="x", alpha=0.3)
        if log:
            lat_ax.set_xscale("log")
            lat_ax.set_xlim(min(lows) / 1.5, top * 4)
        else:
            lat_ax.set_xlim(0, top * 1.35)
        ips_ax.set_xlim(0, ips_top * 1.5)
        lat_ax.set_title(f"batch {batch}: latency per call, ms (dot p50, bar to p90, whisker to p99)", fontsize=9)
        ips_ax.set_title(f"batch {batch}: throughput, images/s", fontsize=9)
    fig.suptitle(f"vitexport bench: {report.get('model') or ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(report: dict, stem: Path) -> dict[str, str]:
    """Write JSON, CSV, Markdown and PNG side by side; return their paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = {ext: stem.with_name(f"{stem.name}.{ext}") for ext in ("json", "csv", "md", "png")}
    write_json(report, paths["json"])
    write_csv(report, paths["csv"])
    write_markdown(report, paths["md"])
    write_plot(report, paths["png"])
    return {k: str(v) for k, v in paths.items()}


# ------------------------------------------------------------------------------------ merge and rank

def load(path: Path) -> dict:
    """Read a bench report, refusing anything that is not one (or is of another schema version)."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read bench report {path}: {e}") from None
    schema = report.get("schema") if isinstance(report, dict) else None
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("vitexport.bench/"):
            raise UsageError(f"{path} is a {schema} report; this vitexport reads {SCHEMA}")
        raise UsageError(f"{path} is not a vitexport bench report (schema {schema!r})")
    if not isinstance(report.get("results"), list):
        raise UsageError(f"{path} has no results list")
    return report


def merge(paths: list[Path]) -> dict:
    """One report from several (e.g. one per machine). Every row is labelled with the machine it ran
    on (`device_label`) and its source file; each machine's fingerprint and settings are kept."""
    if not paths:
        raise UsageError("give at least one bench report to merge")
    reports = [load(p) for p in paths]
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
        sources.append({"label": label, "path": str(path), "fingerprint": report.get("fingerprint"),
                        "settings": report.get("settings"), "roofline": report.get("roofline"),
                        "roofline_cuda": report.get("roofline_cuda")})
        for r in report["results"]:
            # A row from an already merged report keeps the machine it was measured on.
            results.append({**r, "device_label": r.get("device_label") or label,
                            "source_report": r.get("source_report") or str(path)})
    models = sorted({str(r.get("model")) for r in reports if r.get("model")})
    return {"schema": SCHEMA, "model": " / ".join(models), "label": None, "merged_from": [str(p) for p in paths],
            "sources": sources, "warnings": _merge_warnings(sources, models), "settings": None, "fingerprint": None,
            "results": results, "roofline": None}


merge_reports = merge


def _merge_warnings(sources: list[dict], models: list[str]) -> list[str]:
    warnings = []
    if len(models) > 1:
        warnings.append(f"the reports measured different models ({', '.join(models)})")
    for key, what in (("mode", "timing modes"), ("threads", "thread counts")):
        seen = {str((s.get("settings") or {}).get(key)) for s in sources}
        if len(seen) > 1:
            warnings.append(f"the reports used different {what}: {', '.join(sorted(seen))}")
    return warnings


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
