"""Rows timed on a device (a package's check, its report judged and joined to a comparison) in the words
tables and pages show: whether the device's outputs were verified there, and the conditions the device
reported while it timed (a Jetson's power mode, clocks and temperatures; an iPhone's thermal state and
Low Power Mode; an Android phone's thermal status and charging; Linux steal time and clock).

Every value here comes from a file written elsewhere: it is turned into text only, never acted on."""

from __future__ import annotations

import math
from typing import Any

VERIFIED, FAILED, NOT_JUDGED = "verified on the device", "failed", "not judged"


def is_device_row(row: dict) -> bool:
    """Whether a row was timed by a package's check on a device (it carries the device's verdict)."""
    return isinstance(row.get("device_check"), dict)


def verdict(row: dict) -> str:
    """The row's check in words: 'verified on the device', 'failed: <why>', 'not judged: <why>'; for a
    row timed here by bench, how bench checked its artifact ('here: verified')."""
    check = row.get("device_check")
    if not isinstance(check, dict):
        status = (row.get("verification") or {}).get("status")
        return f"here: {status}" if status else ""
    said = str(check.get("verdict") or NOT_JUDGED)
    return f"{said}: {check['reason']}" if said != VERIFIED and check.get("reason") else said


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _jetson(j: dict) -> list[str]:
    parts = []
    if j.get("power_mode"):
        parts.append(f"power mode {j['power_mode']}")
    clocks = j.get("clocks") if isinstance(j.get("clocks"), dict) else {}
    mhz = [f"{name} {_number(clocks.get(f'{name.lower()}_mhz')):.0f} MHz" for name in ("CPU", "GPU", "EMC")
           if _number(clocks.get(f"{name.lower()}_mhz")) is not None]
    if mhz:
        parts.append(", ".join(mhz))
    zones = {str(k): _number(v) for k, v in (j.get("thermal_c") or {}).items()} \
        if isinstance(j.get("thermal_c"), dict) else {}
    zones = {k: v for k, v in zones.items() if v is not None}
    if zones:
        hottest = max(zones, key=zones.get)
        parts.append(f"up to {zones[hottest]:.0f} °C ({hottest})")
    return parts


def _ios(i: dict) -> list[str]:
    parts = []
    if i.get("thermal_state"):
        parts.append(f"thermal state {i['thermal_state']}")
    if isinstance(i.get("low_power_mode"), bool):
        parts.append(f"Low Power Mode {'on' if i['low_power_mode'] else 'off'}")
    return parts


def _android(a: dict) -> list[str]:
    parts = []
    if a.get("thermal_status"):
        parts.append(f"thermal status {a['thermal_status']}")
    if isinstance(a.get("charging"), bool):
        parts.append("charging" if a["charging"] else "on battery")
    if _number(a.get("battery_temp_c")) is not None:
        parts.append(f"battery {_number(a['battery_temp_c']):.0f} °C")
    return parts


READINGS = {"jetson": _jetson, "ios": _ios, "android": _android}


def conditions(c: dict | None) -> str:
    """A device's conditions in one line: 'power mode 15W; CPU 1984 MHz, GPU 918 MHz; up to 52 °C (gpu);
    5 rounds in 10 s; 0 of 5 rounds disturbed'. '' when the report kept none (an older check)."""
    if not isinstance(c, dict):
        return ""
    parts: list[str] = []
    for platform, read in READINGS.items():
        if isinstance(c.get(platform), dict):
            parts += read(c[platform])
    rounds, seconds = _number(c.get("rounds")), _number(c.get("seconds"))
    if rounds:
        parts.append(f"{rounds:.0f} rounds" + (f" in {seconds:.0f} s" if seconds is not None else ""))
    steal = c.get("steal") if isinstance(c.get("steal"), dict) else None
    if steal and _number(steal.get("mean")) is not None:
        parts.append(f"steal {steal['mean']:.1%}" + (f" (max {steal['max']:.0%})" if _number(steal.get("max"))
                                                     is not None else ""))
    clock = c.get("clock_ghz") if isinstance(c.get("clock_ghz"), dict) else None
    if clock and _number(clock.get("median")) is not None:
        parts.append(f"clock {clock['median']:.2f} GHz" + (f" ({clock['source']})" if clock.get("source") else ""))
    if rounds and _number(c.get("disturbed_rounds")) is not None:
        parts.append(f"{c['disturbed_rounds']:.0f} of {rounds:.0f} rounds disturbed")
    return "; ".join(parts)


def source_conditions(source: dict) -> str:
    """The conditions a device report among a comparison's sources kept, in one line (kept with the
    device: a device's readings are not a bench run's and are not read as one)."""
    device = source.get("device") if isinstance(source.get("device"), dict) else {}
    return conditions(device.get("conditions"))


def spread(row: dict) -> float | None:
    """The relative spread of the row's round medians (None with fewer than 2 rounds, or none kept)."""
    return _number(row.get("round_spread")) if row.get("available") else None


def source_line(source: dict) -> str:
    """A device report among a comparison's sources in one line: the device, its OS, the package and the
    judgement: 'Jetson Orin NX (ONNX Runtime 1.18.1, TensorrtExecutionProvider); Ubuntu 22.04; package
    vit-onnx-jetson: verified on the device'."""
    from pathlib import Path

    from vitexport.report.names import device_name

    device = source.get("device") or {}
    facts = device.get("facts") if isinstance(device.get("facts"), dict) else {}
    parts = [device_name(facts)]
    if facts.get("os"):
        parts.append(str(facts["os"]))
    if _number(device.get("budget_s")) is not None:
        parts.append(f"{device['budget_s']:g} s of timed runs per case")
    package = f"package {Path(device['package']).name}" if device.get("package") else "its package not at hand"
    judged = str(device.get("verdict") or NOT_JUDGED)
    parts.append(f"{package}: {judged}" + (f" ({device['reason']})" if judged != VERIFIED and device.get("reason")
                                           else ""))
    return "; ".join(parts)
