"""The bench report's plot (PNG): per batch size, latency and throughput of every row, with the rows
that could not run still named. matplotlib is imported only when a plot is drawn, and it is optional
(the `bench` extra): without it the PNG is left out, with a line that says so, and nothing else is lost
(the HTML page draws its own charts without any library)."""

from __future__ import annotations

from pathlib import Path

from vitexport.core.words import milliseconds
from vitexport.report.tables import COLUMNS, by_batch, shorten, unavailable_note


def left_out(files: dict) -> str | None:
    """The line to print when a report's files lack the PNG (matplotlib was missing), else None."""
    if "png" in files:
        return None
    return "PNG plot left out: matplotlib is not installed here (pip install 'vitexport[bench]')"


def can_draw() -> bool:
    """Whether matplotlib is installed here (the `bench` extra), without importing it."""
    from importlib.util import find_spec

    return find_spec("matplotlib") is not None


def _tail(latency: dict, stat: str) -> float:
    """p90 or p99, or the p50 where a row kept none (an older device check: p50, mean and min only)."""
    value = latency.get(stat)
    return value if value is not None else latency["p50"]


def write_plot(report: dict, path: Path) -> bool:
    """One row of panels per batch size: latency (dot at p50, thick bar to p90, whisker to p99) and
    throughput. Unavailable backends keep their line, labelled with the reason, so the plot shows
    everything that was tried; unstable rows are drawn in red. Returns False, having written nothing,
    where matplotlib is not installed: the plot repeats the tables, so it never costs the run."""
    try:
        import matplotlib
    except ImportError:
        return False

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
        log = bool(lows) and max(_tail(r["latency_ms"], "p99") for r in ok) / max(min(lows), 1e-9) > 20
        top = max([_tail(r["latency_ms"], "p99") for r in ok] or [1.0])
        ips_top = max([r.get("throughput_ips") or 0 for r in ok] or [1.0])
        for y, r in zip(ys, group):
            if not r.get("available"):
                note = shorten(unavailable_note(r), 60)
                for ax in (lat_ax, ips_ax):
                    ax.text(0.01, y, note, va="center", color="0.4", fontsize=8,
                            transform=ax.get_yaxis_transform())
                continue
            lat = {**r["latency_ms"], "p90": _tail(r["latency_ms"], "p90"), "p99": _tail(r["latency_ms"], "p99")}
            color = "#c44e52" if r.get("unstable") else "#4c72b0"
            lat_ax.plot([lat["p50"], lat["p99"]], [y, y], color=color, lw=1)
            lat_ax.plot([lat["p50"], lat["p90"]], [y, y], color=color, lw=6, alpha=0.45, solid_capstyle="butt")
            lat_ax.plot([lat["p99"]], [y], "|", color=color, markersize=12)
            lat_ax.plot([lat["p50"]], [y], "o", color=color)
            lat_ax.annotate(milliseconds(lat['p50']) + (" (unstable)" if r.get("unstable") else ""),
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
    return True
