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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from vitexport.core.errors import UsageError

SCHEMA = "vitexport.bench/1"


# ---------------------------------------------------------------------------------------------- helpers

def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value:.{digits}f}"


def _mb(nbytes: Any) -> float | None:
    return nbytes / 1e6 if nbytes else None


def _short_provider(provider: str | None) -> str:
    return (provider or "").replace("ExecutionProvider", "")


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
    """A short name for the machine a report came from: its --label, its GPUs, else its CPU; a
    Jetson's power mode follows, since one board in two modes is two different machines."""
    fp = report.get("fingerprint") or {}
    gpu = ", ".join(g for g in fp.get("gpus", []) if g and g != "none")
    name = report.get("label") or gpu or short_cpu(fp.get("cpu") or "") or fallback
    mode = fp.get("jetson_power_mode")
    return f"{name} ({mode})" if mode and not report.get("label") else name


def jetson_line(fp: dict) -> str:
    """'Jetson R36 (release), REVISION: 4.3, power mode MAXN, clocks locked'; '' off a Jetson."""
    if not fp.get("jetson_l4t"):
        return ""
    return (f"Jetson {fp['jetson_l4t'].lstrip('# ')}, power mode {fp.get('jetson_power_mode') or 'unknown'}, "
            f"clocks {fp.get('jetson_clocks') or 'unknown'}")


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: unknown numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------- columns

def roofline_fraction(row: dict) -> float | None:
    """The row's share of its GEMM rate. Rows written before `roofline_basis` existed compared GPU
    runs with the CPU's rate; those fractions are not shown."""
    frac = row.get("roofline_fraction")
    if not isinstance(frac, (int, float)) or not math.isfinite(frac):
        return None
    if "roofline_basis" not in row:
        from vitexport.bench.roofline import basis

        if basis(row.get("provider")) != "cpu":
            return None
    return float(frac)


def _roofline_basis(row: dict) -> str | None:
    # Only next to a fraction that is shown: a basis on its own would describe nothing.
    return row.get("roofline_basis") if roofline_fraction(row) is not None else None


def _show_gpu(report: dict) -> bool:
    return any(r.get("peak_gpu_mb") for r in report["results"])


def _show_roofline(report: dict) -> bool:
    return any(roofline_fraction(r) is not None for r in report["results"])


def _unavailable_note(row: dict) -> str:
    return f"unavailable: {row.get('reason') or 'unknown'}"


def _status(row: dict) -> str:
    return "ok" if row.get("available") else _unavailable_note(row)


def _terminal_name(row: dict) -> str:
    """Backend, then its provider where that tells something: the terminal has no provider column."""
    name, provider = str(row.get("backend", "")), _short_provider(row.get("provider"))
    if provider and provider not in ("torch-cpu", "torch-cuda") and provider.lower() not in name.lower():
        name += f" ({provider})"
    return name


def _field(name: str) -> Callable[[dict], Any]:
    return lambda row: row.get(name)


def _latency(stat: str) -> Callable[[dict], Any]:
    return lambda row: row["latency_ms"].get(stat)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _markup(value: Any) -> str:
    """Text for the terminal table, where `[...]` would otherwise be read as rich markup."""
    from rich.markup import escape

    return escape(_text(value))


def _f2(value: Any) -> str:
    return _f(value, 2)


def _sig(value: Any) -> str:
    """Compact number for the terminal: about three significant digits."""
    if value is None or not math.isfinite(value):
        return ""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def _vs_baseline(row: dict) -> dict | None:
    return row.get("vs_baseline")


def _change(vs: dict | None) -> str:
    """'+12% (+9%..+15%) > 10%' for a row slower beyond its threshold (the interval where there is
    one), '-3% (-5%..-1%)' within it, '+8% (+1%..+15%) ?' when the comparison could not tell."""
    if not vs:
        return ""
    text = f"{vs['change']:+.0%}"
    if vs.get("low") is not None and vs.get("high") is not None:
        text += f" ({vs['low']:+.0%}..{vs['high']:+.0%})"
    if vs["regressed"]:
        text += f" > {vs['threshold']:.0%}"
    elif vs.get("verdict") == "inconclusive":
        text += " ?"
    return text


def _change_markup(vs: dict | None) -> str:
    """The terminal's shorter form: no interval ('+12%>10%', '+8%?')."""
    if not vs:
        return ""
    if vs["regressed"]:
        return f"[red]{vs['change']:+.0%}>{vs['threshold']:.0%}[/red]"
    return f"{vs['change']:+.0%}" + ("[yellow]?[/yellow]" if vs.get("verdict") == "inconclusive" else "")


def _show_knee(report: dict) -> bool:
    return any(r.get("sweep") for r in report.get("results", []))


def _knee(row: dict) -> Any:
    return bool(row.get("knee")) if row.get("sweep") else None


def _show_baseline(report: dict) -> bool:
    return bool(report.get("baseline"))


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column of the reports. The CSV, the Markdown table and the terminal table each walk
    `COLUMNS` in order and take the columns they have a header for: a new column is one new entry."""

    key: str  # names the column in code and tests
    value: Callable[[dict], Any]  # result row -> raw value, as the CSV writes it
    csv: str | None = None  # CSV field name
    markdown: str | None = None  # Markdown header
    terminal: str | None = None  # terminal header
    fmt: Callable[[Any], str] = _text  # raw value -> Markdown cell
    compact: Callable[[Any], str] = _markup  # raw value -> terminal cell (rich markup), narrower than Markdown
    # Whether the tables show the column for this report (an empty column only takes room). The CSV
    # always has every field, so that its header is the same for every report.
    shown: Callable[[dict], bool] = lambda report: True
    # Says which run a row is: filled in also for a row that could not run.
    always: bool = False
    # Terminal (min, max) width of a left-aligned text column that may fold; None: a right-aligned number.
    width: tuple[int, int] | None = None


COLUMNS: tuple[Column, ...] = (
    # Which run a row is. The tables name the machine only in a merged report; the CSV always does.
    Column(key="device", csv="device", markdown="device", terminal="device", value=_field("device_label"),
           shown=is_merged, always=True, width=(10, 24)),
    Column(key="model", csv="model", value=_field("model"), always=True),
    Column(key="backend", csv="backend", markdown="backend", value=_field("backend"), always=True),
    # The terminal has no room for a provider column: there the provider follows the backend's name.
    Column(key="name", terminal="backend", value=_terminal_name, always=True, width=(12, 28)),
    Column(key="provider", csv="provider", markdown="provider", value=_field("provider"), fmt=_short_provider,
           always=True),
    Column(key="precision", csv="precision", markdown="precision", terminal="prec", value=_field("precision"),
           always=True),
    Column(key="batch", csv="batch_size", markdown="batch", terminal="batch", value=_field("batch_size"), fmt=str,
           compact=str, always=True),
    Column(key="status", csv="status", value=_status, always=True),
    # Measurements: empty where a row could not run.
    Column(key="p50", csv="p50_ms", markdown="p50 ms", terminal="p50", value=_latency("p50"), fmt=_f2, compact=_sig),
    Column(key="p90", csv="p90_ms", markdown="p90 ms", terminal="p90", value=_latency("p90"), fmt=_f2, compact=_sig),
    Column(key="p99", csv="p99_ms", markdown="p99 ms", terminal="p99", value=_latency("p99"), fmt=_f2, compact=_sig),
    # The tables put mean and std in one cell; the CSV keeps each number (and min, max) in its own field.
    Column(key="mean_std", markdown="mean ± std ms", terminal="mean±sd",
           value=lambda row: (row["latency_ms"]["mean"], row["latency_ms"]["std"]),
           fmt=lambda mean_std: "{:.2f} ± {:.2f}".format(*mean_std),
           compact=lambda mean_std: "{}±{}".format(*map(_sig, mean_std))),
    Column(key="mean", csv="mean_ms", value=_latency("mean")),
    Column(key="std", csv="std_ms", value=_latency("std")),
    Column(key="min", csv="min_ms", value=_latency("min")),
    Column(key="max", csv="max_ms", value=_latency("max")),
    Column(key="throughput", csv="throughput_ips", markdown="images/s", terminal="img/s",
           value=_field("throughput_ips"), fmt=_f, compact=_sig),
    # CSV only, here to keep the CSV header's order. The tables show CV and its unstable flag in one
    # cell, after the memory columns.
    Column(key="cv", csv="cv", value=_field("cv")),
    Column(key="unstable", csv="unstable", value=_field("unstable")),
    Column(key="iterations", csv="iterations", value=_field("iterations")),
    # How many short rounds the row took turns in, and how much their medians differ (robust CV).
    Column(key="rounds", csv="rounds", value=_field("rounds")),
    Column(key="round_spread", csv="round_spread", value=_field("round_spread")),
    Column(key="load", csv="load_s", markdown="load s", terminal="load", value=_field("load_s"), fmt=_f2,
           compact=_f2),
    Column(key="first", csv="first_inference_ms", markdown="first ms", terminal="1st",
           value=_field("first_inference_ms"), fmt=_f, compact=_sig),
    Column(key="artifact", csv="artifact_mb", markdown="artifact MB", terminal="file",
           value=lambda row: _mb(row.get("artifact_bytes")), fmt=_f, compact=_sig),
    Column(key="peak_rss", csv="peak_rss_mb", markdown="peak RSS MB", terminal="RSS", value=_field("peak_rss_mb"),
           fmt=_f, compact=_sig),
    Column(key="peak_gpu", csv="peak_gpu_mb", markdown="peak GPU MB", terminal="GPU", value=_field("peak_gpu_mb"),
           fmt=_f, compact=_sig, shown=_show_gpu),
    Column(key="cv_flag", markdown="CV", terminal="CV", value=lambda row: (row.get("cv"), row.get("unstable")),
           fmt=lambda cv_flag: _f(cv_flag[0], 3) + (" unstable" if cv_flag[1] else ""),
           compact=lambda cv_flag: f"[red]{_f(cv_flag[0], 2)}[/red]" if cv_flag[1] else _f(cv_flag[0], 2)),
    Column(key="roofline", csv="roofline_fraction", markdown="of GEMM", terminal="roof", value=roofline_fraction,
           fmt=_percent, compact=_percent, shown=_show_roofline),
    Column(key="roofline_basis", csv="roofline_basis", value=_roofline_basis),
    # p50 change against `bench --baseline`'s like row, marked where it is beyond the row's threshold;
    # the CSV keeps the fraction.
    Column(key="vs_baseline", markdown="vs baseline", terminal="vs base", value=_vs_baseline, fmt=_change,
           compact=_change_markup, shown=_show_baseline),
    Column(key="p50_change", csv="p50_change_vs_baseline", value=lambda row: (_vs_baseline(row) or {}).get("change")),
    Column(key="change_low", csv="change_low_vs_baseline", value=lambda row: (_vs_baseline(row) or {}).get("low")),
    Column(key="change_high", csv="change_high_vs_baseline", value=lambda row: (_vs_baseline(row) or {}).get("high")),
    Column(key="verdict", csv="verdict_vs_baseline", value=lambda row: (_vs_baseline(row) or {}).get("verdict")),
    # `--batch auto`: the batch with the most images/s (within the latency budget) of a sweep.
    Column(key="knee", csv="knee", markdown="knee", terminal="knee", value=_knee,
           fmt=lambda v: "knee" if v else "", compact=lambda v: "[bold]knee[/bold]" if v else "", shown=_show_knee),
)

# Machine-readable columns: raw numbers, no units in cells.
CSV_FIELDS = tuple(c.csv for c in COLUMNS if c.csv)


# ------------------------------------------------------------------------------------------ table rows

def _shown(report: dict, table: str) -> list[Column]:
    """The columns that `table` ("markdown" or "terminal") shows for this report."""
    return [c for c in COLUMNS if getattr(c, table) and c.shown(report)]


def _in_table_order(report: dict) -> list[dict]:
    return [r for _, group in by_batch(report["results"]) for r in group]


def _cells(row: dict, columns: list[Column], terminal: bool, unavailable_cell: str) -> list[str]:
    """A row's cells, in Markdown (`fmt`) or terminal (`compact`) form. A row that could not run keeps
    its identity cells and shows `unavailable_cell` where its numbers would be: it was tried."""
    ran = row.get("available")
    cells = []
    for c in columns:
        if ran or c.always:
            raw = c.value(row)
            cells.append(c.compact(raw) if terminal else c.fmt(raw))
        else:
            cells.append("")
    if not ran:
        cells[next(i for i, c in enumerate(columns) if not c.always)] = unavailable_cell
    return cells


def table_columns(report: dict) -> list[str]:
    return [c.markdown for c in _shown(report, "markdown")]


def table_rows(report: dict) -> list[list[str]]:
    """Display rows in `table_columns` order, grouped by batch size; an unavailable backend keeps
    its row with `unavailable: <reason>` where its numbers would be."""
    columns = _shown(report, "markdown")
    return [_cells(r, columns, False, _unavailable_note(r)) for r in _in_table_order(report)]


def rows(report: dict) -> list[list[str]]:
    """Alias of `table_rows`, kept for callers of the first version."""
    return table_rows(report)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def rich_table(report: dict, title: str = "vitexport bench"):
    """The terminal table: the Markdown table's columns in compact form, one section per batch size.
    An unavailable backend keeps its row, with `unavailable: <reason>` under its name."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    columns = _shown(report, "terminal")
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0),
                  caption="ms: p50 p90 p99 mean±sd, 1st = first inference; load in s; file, RSS, GPU in MB "
                          "(10^6 bytes); CV = std/mean; roof = share of the best GEMM rate measured in the rounds")
    for c in columns:
        if c.width:
            table.add_column(c.terminal, min_width=c.width[0], max_width=c.width[1], overflow="fold")
        else:
            table.add_column(c.terminal, justify="right", no_wrap=True)
    name = [c.key for c in columns].index("name")  # notes on a row go under its name, where there is room
    groups = by_batch(report["results"])
    for i, (_, group) in enumerate(groups):
        for r in group:
            cells = _cells(r, columns, True, "[dim]n/a[/dim]")
            if not r.get("available"):
                # Shortened here to keep the table readable; `unavailable()` gives the whole reason.
                cells[name] += f"\n[dim]{escape(_shorten(_unavailable_note(r), 72))}[/dim]"
            elif r.get("unstable"):
                cells[name] += f"\n[red]unstable: CV {r['cv']:.2f} > {r.get('unstable_cv', 0.1):.2f}[/red]"
            table.add_row(*cells)
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
    for r in _in_table_order(report):
        # Every record names its machine and model, also in a single-machine report whose rows don't.
        row = {"model": report.get("model"), **r, "device_label": r.get("device_label") or own}
        out.append(_clean({c.csv: c.value(row) for c in COLUMNS if c.csv and (r.get("available") or c.always)}))
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
    jetson = jetson_line(fp)
    return (f"{fp.get('cpu', '?')} ({cores}); GPU: {', '.join(fp.get('gpus') or ['none'])}; "
            + (f"{jetson}; " if jetson else "") + f"{fp.get('os', '?')}; "
            f"Python {fp.get('python', '?')}; threads {threads}" + (f"; {libs}" if libs else "")
            + (f"; measured {fp['timestamp']}" if fp.get("timestamp") else ""))


def _settings_line(settings: dict) -> str:
    if not settings:
        return ""
    stop = f"{settings['iters']} timed runs" if settings.get("iters") else f"{settings.get('budget_s')} s of timed runs"
    rounds = settings.get("rounds")
    turns = (f" in {rounds} rounds, the rows taking turns in bursts" if rounds and rounds > 1 else "")
    return (f"Warm-up: at least {settings.get('warmup_iters')} runs and {settings.get('warmup_s')} s; then {stop}"
            f"{turns}. Mode: {settings.get('mode', '?')}.")


BASIS_NAMES = {"cpu": "CPU fp32", "cpu-int8": "CPU int8", "cpu-bf16": "CPU bf16", "cpu-fp16": "CPU fp16",
               "cuda": "GPU fp32", "cuda-fp16": "GPU fp16", "cuda-bf16": "GPU bf16"}


def roofline_lines(report: dict) -> list[str]:
    """Each measured GEMM basis in words: the best library's rate, the others', the theoretical peak;
    then every row whose share was withheld, and why."""
    from vitexport.bench.roofline import REPORT_KEYS

    lines = []
    for basis, key in REPORT_KEYS.items():
        roof = report.get(key)
        if not roof or not roof.get("gflops"):
            continue
        unit = "GOP/s" if basis.endswith("int8") else "GFLOP/s"
        name = BASIS_NAMES.get(basis, basis)
        if not roof.get("libraries"):  # a report from before the rate was measured in rounds
            lines.append(f"{name} GEMM: one {roof.get('n', '?')}³ product at {roof['gflops']:.0f} {unit}.")
            continue
        others = [f"{lib} {v['gflops']:.0f}" for lib, v in roof["libraries"].items()
                  if lib != roof["library"] and v.get("gflops")]
        missing = [f"{lib}: {v['unavailable']}" for lib, v in roof["libraries"].items() if v.get("unavailable")]
        line = (f"{name} GEMM ({roof['n']}³, {roof.get('threads')} threads, measured inside the timed rounds): "
                f"best {roof['gflops']:.0f} {unit} in {roof['library']}"
                + (f" (also {', '.join(others)})" if others else "") + (f"; not measured: {'; '.join(missing)}"
                                                                         if missing else ""))
        pk = roof.get("peak") or {}
        if pk.get("gflops"):
            line += (f"; theoretical peak {pk['gflops']:.0f} {unit} ({pk['cores']} cores × {pk['flop_per_cycle']:g} "
                     f"per cycle [{pk['isa']}] × {pk['ghz']:.2f} GHz, {pk['clock_source']})")
            if pk.get("note"):
                line += f": {pk['note']}"
        elif pk:
            line += "; theoretical peak unknown for this CPU"
        lines.append(line + ".")
    for r in report.get("results", []):
        if r.get("roofline_note"):
            lines.append(f"{r['backend']} {r.get('precision')} batch {r.get('batch_size')}: {r['roofline_note']}.")
    return lines


def sweep_lines(report: dict) -> list[str]:
    """`--batch auto`: each sweep's knee and why it stopped."""
    lines = []
    for sw in report.get("sweeps") or []:
        what = f"{sw['backend']} {sw['precision']}" + (f" ({sw['artifact']})" if sw.get("artifact") else "")
        knee = (f"knee at batch {sw['knee_batch']}: {sw['knee_ips']:.4g} images/s" if sw.get("knee_batch")
                else "no knee within the latency budget")
        steps = ", ".join(f"{s['batch']}: {s['throughput_ips']:.4g}/s"
                          + (f" ({s['gain']['ratio'] - 1:+.0%} paired)" if s.get("gain") else "") for s in sw["steps"])
        lines.append(f"{what}: {knee} (batches {steps}); stopped: {sw['stopped']}.")
    return lines


def baseline_lines(comparison: dict) -> list[str]:
    """The comparison with `bench --baseline` in words: the rule, every compared row with its verdict,
    each row that could not be compared and why (plain text: Markdown list items and terminal lines)."""
    from vitexport.bench.regression import verdict_text

    kind = "artifacts measured in the same rounds" if comparison.get("kind") == "artifacts" else "a stored report"
    lines = [f"Compared with {comparison['path']} ({kind}): {len(comparison['compared'])} rows, "
             f"{len(comparison['regressions'])} slower beyond the limit, "
             f"{len(comparison.get('inconclusive', []))} inconclusive ({comparison['rule']})."]
    label = {"slower": "slower", "ok": "within the margin", "inconclusive": "inconclusive", "undecided": "undecided"}
    for c in comparison["compared"]:
        verdict = c.get("verdict") or ("slower" if c.get("regressed") else "ok")
        why = f" — {c['why']}" if verdict == "inconclusive" and c.get("why") else ""
        lines.append(f"{label.get(verdict, verdict)}: " + (verdict_text(c) if c.get("ratio") is not None
                                                            else c["row"]) + why)
    side = {"now": "", "baseline": " (baseline)"}
    lines += [f"not compared: {u['row']}{side[u['side']]}: {u['reason']}" for u in comparison["unmatched"]]
    return lines


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
                         f"{_machine_line(src.get('fingerprint') or {}, src.get('settings'))}"
                         + "".join(f"; {r}" for r in rates) + (f"; conditions: {cond}" if cond else ""))
        lines.append("")
    elif report.get("fingerprint"):
        lines += [f"Machine: {_machine_line(report['fingerprint'], report.get('settings'))}", ""]
    if _settings_line(report.get("settings") or {}):
        lines += [_settings_line(report["settings"]), ""]
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


def write_plot(report: dict, path: Path) -> None:
    """One row of panels per batch size: latency (dot at p50, thick bar to p90, whisker to p99) and
    throughput. Unavailable backends keep their line, labelled with the reason, so the plot shows
    everything that was tried; unstable rows are drawn in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_batch(report["results"]) or [(None, [])]
    roof = next(c for c in COLUMNS if c.key == "roofline")  # notes the GEMM share as the tables do
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
                note = _shorten(_unavailable_note(r), 60)
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
            share = roof.value(r)
            note = f"{ips:.3g}/s" + (f", {roof.fmt(share)} {roof.markdown}" if share is not None else "")
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


REPORT_SUFFIXES = ("json", "csv", "md", "png")


def report_paths(stem: Path) -> dict[str, Path]:
    return {ext: stem.with_name(f"{stem.name}.{ext}") for ext in REPORT_SUFFIXES}


def check_writable(stem: Path, inputs: Iterable[Path] = ()) -> None:
    """Refuse (exit 2) report files that would replace what vitexport did not write: anything but a
    regular file, one of this command's own inputs, or a set whose JSON is not a vitexport report."""
    from vitexport.core.jsonfile import read_json

    paths = report_paths(Path(stem))
    taken = {ext: p for ext, p in paths.items() if p.exists() or p.is_symlink()}
    if not taken:
        return
    for p in taken.values():
        if p.is_symlink() or not p.is_file():
            raise UsageError(f"{p} exists and is not a report file vitexport wrote; give another --out")
        for given in inputs:
            if Path(given).exists() and p.samefile(given):
                raise UsageError(f"{p} is one of the reports given; writing there would replace it: give another --out")
    owner = paths["json"]
    try:
        written = read_json(owner, "report") if owner in taken.values() else None
    except UsageError:
        written = None
    schema = written.get("schema") if isinstance(written, dict) else None
    if not (isinstance(schema, str) and schema.startswith("vitexport.")):
        names = ", ".join(str(p) for p in taken.values())
        raise UsageError(f"{names}: not written by vitexport (no vitexport report {owner.name} beside it); "
                         "give another --out")


def write_all(report: dict, stem: Path, inputs: Iterable[Path] = ()) -> dict[str, str]:
    """Write JSON, CSV, Markdown and PNG side by side and return their paths. Each is written under a
    temporary name first and renamed into place only when all four are complete: an interrupted run
    leaves the previous set (or nothing), never half a file."""
    import os

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    check_writable(stem, inputs)
    paths = report_paths(stem)
    partial = {ext: p.with_name(f".{p.stem}.{os.getpid()}.partial.{ext}") for ext, p in paths.items()}
    try:
        write_json(report, partial["json"])
        write_csv(report, partial["csv"])
        write_markdown(report, partial["md"])
        write_plot(report, partial["png"])
        for ext, p in paths.items():
            os.replace(partial[ext], p)
    finally:
        for p in partial.values():
            p.unlink(missing_ok=True)
    return {k: str(v) for k, v in paths.items()}


# ------------------------------------------------------------------------------------ merge and rank

def load(path: Path) -> dict:
    """Read a bench report, refusing anything that is not one (or is of another schema version)."""
    from vitexport.core.jsonfile import read_json

    report = read_json(Path(path), "bench report")
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
        from vitexport.bench.roofline import REPORT_KEYS

        sources.append({"label": label, "path": str(path), "fingerprint": report.get("fingerprint"),
                        "settings": report.get("settings"), "conditions": report.get("conditions"),
                        **{key: report.get(key) for key in REPORT_KEYS.values()}})
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
