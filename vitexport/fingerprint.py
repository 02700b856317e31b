"""Where a benchmark ran: enough to tell two machines apart, nothing that names the host or its user.

Versions, GPUs and the Jetson release come from vitexport.environment, which never imports (or
initialises) torch, ONNX Runtime or TensorRT itself.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from .bench import THREAD_ENV
from .environment import gpus, jetson_power, jetson_release, now, run_quietly, versions


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _sysctl(name: str) -> str | None:
    if sys.platform != "darwin":
        return None
    out = run_quietly(["sysctl", "-n", name], timeout=5)
    return (out.strip() or None) if out else None


def cpu_model() -> str:
    """The CPU's marketing name; on Arm boards without one, the board's model (e.g. a Jetson)."""
    info = _read("/proc/cpuinfo") or ""
    for line in info.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    board = (_read("/sys/firmware/devicetree/base/model") or "").strip("\x00\n ")
    if board:
        return board
    return _sysctl("machdep.cpu.brand_string") or platform.processor() or platform.machine() or "unknown"


def physical_cores() -> int | None:
    """Distinct (package, core) pairs: hyper-threads share one core's arithmetic units."""
    info = _read("/proc/cpuinfo")
    if info:
        pairs, package = set(), "0"
        for line in info.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "physical id":
                package = value.strip()
            elif key == "core id":
                pairs.add((package, value.strip()))
        if pairs:
            return len(pairs)
    topology = Path("/sys/devices/system/cpu")
    pairs = set()
    for cpu in topology.glob("cpu[0-9]*/topology"):
        core, package = _read(str(cpu / "core_id")), _read(str(cpu / "physical_package_id"))
        if core is not None:
            pairs.add(((package or "0").strip(), core.strip()))
    if pairs:
        return len(pairs)
    value = _sysctl("hw.physicalcpu")
    return int(value) if value and value.isdigit() else None


# Instruction sets that decide how fast matrix code runs, by the names /proc/cpuinfo, sysctl
# machdep.cpu.* (Intel Macs, upper case) and sysctl hw.optional.* (Apple silicon) give them, compared
# without case, "_", "." or an "arm.feat" prefix.
ISA_FEATURES = {
    "avx2": "AVX2", "fma": "FMA", "avx512f": "AVX-512", "avx512vnni": "AVX-512 VNNI", "avxvnni": "AVX-VNNI",
    "avx512bf16": "AVX-512 BF16", "avx512fp16": "AVX-512 FP16", "amxtile": "AMX", "amxint8": "AMX-INT8",
    "amxbf16": "AMX-BF16",
    "neon": "NEON", "asimd": "NEON", "asimdhp": "NEON FP16", "fphp": "NEON FP16", "fp16": "NEON FP16",
    "asimddp": "dot product", "dotprod": "dot product", "i8mm": "int8 matmul", "bf16": "BF16",
    "sve": "SVE", "sve2": "SVE2", "sme": "SME",
}


def cpu_features() -> list[str]:
    """The instruction sets in `ISA_FEATURES` this CPU has, in that table's order."""
    info = _read("/proc/cpuinfo") or ""
    flags = [word for line in info.splitlines() if line.split(":")[0].strip() in ("flags", "Features")
             for word in line.split(":", 1)[1].split()]
    if not flags and sys.platform == "darwin":
        flags = (_sysctl("machdep.cpu.features") or "").split() + (_sysctl("machdep.cpu.leaf7_features") or "").split()
        optional = run_quietly(["sysctl", "hw.optional"], timeout=5) or ""
        flags += [line.split(":")[0].rsplit(".", 1)[-1] for line in optional.splitlines()
                  if line.rsplit(":", 1)[-1].strip() == "1"]
    return isa_names(flags)


def isa_names(flags: list[str]) -> list[str]:
    """Raw CPU flags -> the names in `ISA_FEATURES`, each once, in that table's order."""
    have = {f.lower().replace("_", "").replace(".", "").removeprefix("feat") for f in flags}
    return list(dict.fromkeys(name for key, name in ISA_FEATURES.items() if key in have))


def usable_cores() -> int | None:
    """Cores this process may run on (a container or taskset can allow fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def fingerprint(threads: int | None = None) -> dict:
    """The machine, software and thread settings a report was measured with. No hostname, user
    name or path: reports are meant to be shared."""
    names, driver, source = gpus()
    jetson = jetson_power()
    return {
        "cpu": cpu_model(),
        "physical_cores": physical_cores(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "gpus": names or ["none"],
        "gpu_driver": driver,
        "gpu_source": source,
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "libraries": versions(),
        "threads": threads,
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
        "cpu_features": cpu_features(),
        "jetson_l4t": jetson_release(),
        # Both change a Jetson's latency by multiples, so two reports differing in them are different machines.
        "jetson_power_mode": jetson["power_mode"],
        "jetson_clocks": jetson["clocks"],
        "timestamp": now(),
    }
