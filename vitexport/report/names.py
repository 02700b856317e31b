"""Short names people read for where results came from: the machine a bench report was measured on
(tables, merged reports, plots) and the device that ran a package's check (the device report)."""

from __future__ import annotations

import re
from typing import Any


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


def device_name(facts: dict[str, Any]) -> str:
    """The device in a few words: its model (or OS), the runtime and its compute units or provider."""
    what = str(facts.get("model") or facts.get("cpu") or facts.get("os") or "the device")
    how = [str(facts[k]) for k in ("runtime", "compute_units") if facts.get(k)]
    if facts.get("provider") and str(facts["provider"]) not in " ".join(how):
        how.append(str(facts["provider"]))
    if facts.get("stand_in"):
        how.append("stand-in")
    return what + (f" ({', '.join(how)})" if how else "")
