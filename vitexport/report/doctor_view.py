"""What `vitexport doctor` shows on a terminal: the machine, then one row per backend with what it can
do here, then what to know."""

from __future__ import annotations

from typing import Any

from vitexport.report.console import escape, print_table, wide_console


def doctor_report(d: dict[str, Any]) -> None:
    """`vitexport doctor`: the machine, one row per backend with its verdicts, then what to know."""
    from rich import box
    from rich.table import Table

    console = wide_console()
    machine = Table.grid(padding=(0, 2))
    machine.add_column(style="bold", no_wrap=True)
    machine.add_column(overflow="fold")
    for name, text in machine_lines(d):
        machine.add_row(name, escape(text))
    console.print(machine)
    table = Table(title="backends here", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("backend", "export here", "run here", "bench here"):
        table.add_column(column, overflow="fold", no_wrap=column == "backend")
    notes = []
    for b in d["backends"]:
        bench = ", ".join(("[green]" if t["ok"] else "[red]no [/red][dim]") + escape(t["target"])
                          + ("[/green]" if t["ok"] else "[/dim]") for t in b["bench"])
        table.add_row(b["name"], verdict(b["export"], "n/a (the reference; writes no artifact)"), verdict(b["run"]),
                      bench)
        notes += [f"{b['name']}: {note}" for note in b["notes"]]
        notes += [f"{b['name']}: bench {t['target']} cannot run: {t['reason']}" for t in b["bench"]
                  if not t["ok"] and t["reason"] != b["run"]["reason"]]
    print_table(console, table)
    for note in notes:
        console.print(f"- {escape(note)}", highlight=False, soft_wrap=True)


def machine_lines(d: dict[str, Any]) -> list[tuple[str, str]]:
    cpu, mem, gpu, jetson = d["cpu"], d["memory"], d["gpu"], d["jetson"]
    cores = f"{cpu['physical_cores'] or '?'} physical, {cpu['logical_cores']} logical, {cpu['usable_cores']} usable"
    gb = lambda n: f"{n / 1e9:.1f} GB" if n else "?"  # noqa: E731
    os_ = d["os"]
    lines = [("python", f"{d['python']['version']} ({d['python']['implementation']})"),
             ("os", f"{os_['system']} {os_['macos'] or os_['release']} {os_['machine']}"
                    + (f" ({os_['libc']})" if os_["libc"] else "")),
             ("cpu", f"{cpu['model']}: {cores} cores; {', '.join(cpu['isa']) or 'no vector extensions listed'}"),
             ("memory", f"{gb(mem['total_bytes'])} total, {gb(mem['available_bytes'])} available"),
             ("gpu", (", ".join(gpu["names"]) + f" (driver {gpu['driver'] or '?'})") if gpu["names"] else "none")]
    if jetson:
        lines.append(("jetson", f"L4T {jetson['l4t']} (JetPack {jetson['jetpack'] or '?'}), power mode "
                                f"{jetson['power_mode'] or 'unknown'}, clocks {jetson['clocks'] or 'unknown'}"))
    lines.append(("libraries", ", ".join(f"{k} {v}" for k, v in d["libraries"].items())))
    return lines


def verdict(availability: dict | None, missing: str = "") -> str:
    if availability is None:
        return f"[dim]{escape(missing)}[/dim]"
    word = "[green]yes[/green]" if availability["ok"] else "[red]no[/red]"
    return word + (f": {escape(availability['reason'])}" if availability["reason"] else "")
