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


# How people name what a device computed on: Core ML's compute units, runtimes' providers.
COMPUTE_UNITS = {"cpu_and_ne": "Neural Engine", "cpuandneuralengine": "Neural Engine", "all": "all compute units",
                 "cpu_only": "CPU only", "cpuonly": "CPU only", "cpu_and_gpu": "CPU and GPU", "cpuandgpu": "CPU and GPU"}
PHONES_AND_BOARDS = ("jetson", "ios", "android")


def short_provider(provider: str) -> str:
    """'XNNPACKExecutionProvider' -> 'XNNPACK', 'executorch-xnnpack' -> 'XNNPACK', 'TensorrtExecutionProvider'
    -> 'TensorRT': the kernel library in the word its users say."""
    name = re.sub(r"ExecutionProvider$", "", provider.strip())
    name = re.sub(r"^executorch-", "", name, flags=re.IGNORECASE)
    known = {"xnnpack": "XNNPACK", "tensorrt": "TensorRT", "cuda": "CUDA", "cpu": "CPU", "coreml": "Core ML",
             "qnn": "QNN", "nnapi": "NNAPI", "vulkan": "Vulkan", "mps": "MPS", "openvino": "OpenVINO"}
    return known.get(name.lower(), name)


def _board(model: str) -> str:
    """'NVIDIA Jetson Orin NX Engineering Reference Developer Kit' -> 'Jetson Orin NX'."""
    model = re.sub(r"^NVIDIA\s+", "", model.strip())
    return " ".join(re.sub(r"\b(Engineering Reference\s+)?Developer Kit\b", " ", model).split()) or model


def _watts(mode: str) -> str:
    """nvpmodel's '15W' -> '15 W'; a mode by another name ('MAXN') as it is."""
    return re.sub(r"^(\d+(?:\.\d+)?)\s*W$", r"\1 W", mode.strip())


def device_label(facts: dict[str, Any], conditions: dict[str, Any] | None = None, target: str | None = None) -> str:
    """The device a check ran on in the words a table shows: 'Jetson Orin NX, 15 W', 'iPhone 15 Pro, Neural
    Engine', 'Google Pixel 8, XNNPACK', 'AMD EPYC 7B13, CPU'. A board or phone by its model name with what
    changes its speed (a Jetson's power mode, the compute units, the kernel library); a PC by its CPU."""
    conditions = conditions if isinstance(conditions, dict) else {}
    platform = str(conditions.get("platform") or ("jetson" if facts.get("jetson_l4t") else target) or "")
    model, cpu = str(facts.get("model") or "").strip(), short_cpu(str(facts.get("cpu") or ""))
    if platform in PHONES_AND_BOARDS and model:
        what = _board(model)
    else:
        what = cpu or (_board(model) if model else "") or str(facts.get("os") or "the device")
    jetson = conditions.get("jetson") if isinstance(conditions.get("jetson"), dict) else {}
    mode = jetson.get("power_mode") or facts.get("jetson_power_mode")
    units = str(facts.get("compute_units") or "")
    if mode:
        how = _watts(str(mode))
    elif units and units.lower() != "cpu":
        how = COMPUTE_UNITS.get(units.lower().replace(" ", ""), units)
    else:
        how = short_provider(str(facts.get("provider") or "")) if facts.get("provider") else ""
    if facts.get("stand_in"):
        how = f"{how}, stand-in" if how else "stand-in"
    return f"{what}, {how}" if how else what
