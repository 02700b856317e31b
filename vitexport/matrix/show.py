"""The terminal summary of a matrix run: the fastest verified artifact per model and device, then
every cell that did not pass, then where the reports are. Rendered from the dict `--json` prints."""

from __future__ import annotations

from typing import Any


def summary(merged: dict[str, Any]) -> None:
    from rich.table import Table

    from vitexport.report.console import escape, print_table, wide_console
    from vitexport.report.terminal import report_files

    console = wide_console()
    m = merged["matrix"]
    if m["fastest"]:
        table = Table(title=f"vitexport matrix: {m['name']} — fastest verified artifact", title_justify="left")
        for name in ("model", "device", "batch", "fastest", "p50 ms", "img/s", "cosine", "candidates"):
            table.add_column(name, justify="right" if name in ("batch", "p50 ms", "img/s", "candidates") else "left")
        for f in m["fastest"]:
            b = f["best"]
            table.add_row(escape(f["model"]), escape(f["device"]), str(f["batch"]),
                          escape(f"{b['target']} ({b['bench_target']})"), f"{b['p50_ms']:.2f}",
                          f"{b['throughput_ips']:.1f}",  # fixed decimals, as bench's tables: a column reads down
                          "" if b["cosine_similarity"] is None else f"{b['cosine_similarity']:.6f}",
                          str(f["candidates"]))
        print_table(console, table)
    for c in m["cells"]:
        if c["status"] != "passed":
            colour = {"failed": "red", "error": "red", "unavailable": "yellow",
                      "cancelled": "yellow"}.get(c["status"], "cyan")
            console.print(f"[{colour}]{escape(c['status'])}[/{colour}] {escape(c['id'])}"
                          + (f": {escape(c['reason'])}" if c["reason"] else ""), highlight=False, soft_wrap=True)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(m["counts"].items()))
    cached = m["cached"]
    console.print(f"{len(m['cells'])} cells: {counts}; exports run {cached['exports_run']}, cached "
                  f"{cached['exports']}; timings run {cached['timings_run']}, cached {cached['timings']}",
                  highlight=False)
    report_files(console, merged["files"])
