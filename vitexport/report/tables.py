"""The columns of a bench report and the tables built from them: the Markdown table's rows and the
terminal table (the CSV's fields come from the same `COLUMNS`).

A row that could not run keeps `available: False` and its `reason`, and every table shows it as
`unavailable: <reason>`: a missing row would read as "not tried". Tables are grouped by batch size:
latency per call at batch 1 and at batch 8 measure different things.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from vitexport.bench.stored import is_merged
from vitexport.report import devices

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


def _show_load_costs(report: dict) -> bool:
    return any(r.get("load_cold_s") is not None for r in report["results"])


def _show_roofline(report: dict) -> bool:
    return any(roofline_fraction(r) is not None for r in report["results"])


def unavailable_note(row: dict) -> str:
    if devices.is_device_row(row) and row.get("reason"):  # it ran on its device: why it shows no time
        return str(row["reason"])
    return f"unavailable: {row.get('reason') or 'unknown'}"


def _status(row: dict) -> str:
    return "ok" if row.get("available") else unavailable_note(row)


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


def _show_devices(report: dict) -> bool:
    """Whether rows timed on a device are among the report's: then the tables say how each row was
    checked, its runtime, the spread of its rounds and the device's conditions."""
    return any(devices.is_device_row(r) for r in report.get("results", []))


def _runtime(row: dict) -> str | None:
    """The runtime a row ran on: the device's own words for a device row; the provider for a bench row."""
    check = row.get("device_check") or {}
    said = check.get("runtime") if devices.is_device_row(row) else None
    return said or _short_provider(row.get("provider")) or row.get("backend")


def _spread(value: Any) -> str:
    return "" if value is None else f"{value:.1%}"


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
    Column(key="runtime", markdown="runtime", value=_runtime, shown=_show_devices, always=True),
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
    # The relative spread of the round medians (1.4826 x MAD / median): what the regression gates call noise.
    Column(key="spread", markdown="spread", terminal="spread", value=devices.spread, fmt=_spread, compact=_spread,
           shown=_show_devices),
    # A device's check may keep no std (an older one: p50, mean and min only): then the mean alone.
    Column(key="mean_std", markdown="mean ± std ms", terminal="mean±sd",
           value=lambda row: (row["latency_ms"].get("mean"), row["latency_ms"].get("std")),
           fmt=lambda mean_std: _f2(mean_std[0]) + (f" ± {_f2(mean_std[1])}" if mean_std[1] is not None else ""),
           compact=lambda mean_std: _sig(mean_std[0]) + (f"±{_sig(mean_std[1])}" if mean_std[1] is not None
                                                         else "")),
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
    # What the model costs to load and hold (vitexport.bench.loadcost): in the files and the page, not
    # the terminal's table, which stays narrow.
    Column(key="load_cold", csv="load_cold_s", markdown="cold load s", value=_field("load_cold_s"), fmt=_f2,
           shown=_show_load_costs),
    Column(key="load_warm", csv="load_warm_s", markdown="warm load s", value=_field("load_warm_s"), fmt=_f2,
           shown=_show_load_costs),
    Column(key="compile", csv="compile_s", markdown="compile s", value=_field("compile_s"), fmt=_f2,
           shown=_show_load_costs),
    Column(key="model_anon", csv="model_anon_mb", markdown="model MB (own)", value=_field("model_anon_mb"), fmt=_f,
           shown=_show_load_costs),
    Column(key="model_file", csv="model_file_mb", markdown="model MB (mapped)", value=_field("model_file_mb"),
           fmt=_f, shown=_show_load_costs),
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
    # How the row was checked: on its device ('verified on the device', 'failed: ...', 'not judged: ...'),
    # or here by bench ('here: verified'); and the device's conditions while it timed.
    Column(key="on_device", csv="verified_on_device", markdown="verified on device", terminal="check",
           value=devices.verdict, shown=_show_devices, always=True, width=(10, 30)),
    Column(key="conditions", markdown="conditions", value=lambda row: (row.get("device_check") or {}).get(
        "conditions"), shown=_show_devices, always=True),
)

# Machine-readable columns: raw numbers, no units in cells.
CSV_FIELDS = tuple(c.csv for c in COLUMNS if c.csv)


# ------------------------------------------------------------------------------------------ table rows

def shown(report: dict, table: str) -> list[Column]:
    """The columns that `table` ("markdown" or "terminal") shows for this report."""
    return [c for c in COLUMNS if getattr(c, table) and c.shown(report)]


def in_table_order(report: dict) -> list[dict]:
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


def cells(row: dict, columns: list[Column]) -> list[str]:
    """One row's Markdown-form cells (the HTML report shows the same)."""
    return _cells(row, columns, False, unavailable_note(row))


def table_columns(report: dict) -> list[str]:
    return [c.markdown for c in shown(report, "markdown")]


def table_rows(report: dict) -> list[list[str]]:
    """Display rows in `table_columns` order, grouped by batch size; an unavailable backend keeps
    its row with `unavailable: <reason>` where its numbers would be."""
    columns = shown(report, "markdown")
    return [_cells(r, columns, False, unavailable_note(r)) for r in in_table_order(report)]


def rows(report: dict) -> list[list[str]]:
    """Alias of `table_rows`, kept for callers of the first version."""
    return table_rows(report)


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def rich_table(report: dict, title: str = "vitexport bench"):
    """The terminal table: the Markdown table's columns in compact form, one section per batch size.
    An unavailable backend keeps its row, with `unavailable: <reason>` under its name."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    columns = shown(report, "terminal")
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
                cells[name] += f"\n[dim]{escape(shorten(unavailable_note(r), 72))}[/dim]"
            elif r.get("unstable"):
                cells[name] += f"\n[red]unstable: CV {r['cv']:.1%} > {r.get('unstable_cv', 0.1):.1%}[/red]"
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
