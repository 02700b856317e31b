"""Where a benchmark ran: enough to tell two machines apart, nothing that names the host or its user.

Versions, GPUs and the Jetson release come from vitexport.core.environment, which never imports (or
initialises) torch, ONNX Runtime or TensorRT itself.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from vitexport.backends import tool_versions
from vitexport.bench.measure import THREAD_ENV
from vitexport.core.environment import gpus, jetson_power, jetson_release, now, run_quietly


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
        "libraries": tool_versions(),
        "threads": threads,
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
        "cpu_features": cpu_features(),
        "jetson_l4t": jetson_release(),
        # Both change a Jetson's latency by multiples, so two reports differing in them are different machines.
        "jetson_power_mode": jetson["power_mode"],
        "jetson_clocks": jetson["clocks"],
        "timestamp": now(),
    }


# ------------------------------------------------------------------------------------ machine state

def cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat; None where there is no such file.

    Steal is the time the hypervisor ran something else on a vCPU that wanted to run: on a shared
    VM it is the one direct sign that a neighbour took the machine."""
    text = _read("/proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    fields = [int(v) for v in text.splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already in user
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields[:8])


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time stolen between two `cpu_times` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def clock_ghz() -> tuple[float | None, str]:
    """The cores' current clock in GHz, averaged, and where it was read."""
    freqs = [_read(str(p)) for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq")]
    khz = [int(f) for f in freqs if f and f.strip().isdigit()]
    if khz:
        return sum(khz) / len(khz) / 1e6, "cpufreq"
    mhz = _cpuinfo_mhz()
    return (sum(mhz) / len(mhz) / 1000, "cpuinfo") if mhz else (None, "not readable")


def max_clock_ghz() -> tuple[float | None, str]:
    """The highest clock the cores may run at, and where it was read. In a VM, /proc/cpuinfo gives
    the host's nominal clock, below the boost its cores reach: a peak computed from it is a lower
    bound, which `theoretical_peak` says."""
    freqs = [_read(str(p)) for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq")]
    khz = [int(f) for f in freqs if f and f.strip().isdigit()]
    if khz:
        return max(khz) / 1e6, "cpufreq maximum"
    mhz = _cpuinfo_mhz()
    if mhz:
        return max(mhz) / 1000, "cpuinfo (nominal; boost may be higher)"
    import re

    named = re.search(r"@\s*([\d.]+)\s*GHz", cpu_model())
    if named:
        return float(named.group(1)), "the CPU's name (base clock)"
    hz = _sysctl("hw.cpufrequency_max")
    return (int(hz) / 1e9, "sysctl") if hz and hz.isdigit() else (None, "not readable")


def _cpuinfo_mhz() -> list[float]:
    info = _read("/proc/cpuinfo") or ""
    out = []
    for line in info.splitlines():
        if line.startswith("cpu MHz"):
            try:
                out.append(float(line.split(":", 1)[1]))
            except ValueError:
                pass
    return out


def cpu_vendor() -> tuple[str, int | None]:
    """('GenuineIntel' | 'AuthenticAMD' | ..., x86 family number or None)."""
    vendor, family = "", None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key.strip() == "cpu family" and family is None and value.strip().isdigit():
            family = int(value.strip())
    return vendor, family


def flop_per_cycle(features: list[str], vendor: str, family: int | None, precision: str = "fp32") -> \
        tuple[float, str] | None:
    """Arithmetic per core and cycle at `precision` ("fp32", "bf16", "fp16", "int8"), from the
    instruction sets, with the rule used; None where the table has no rule (Arm, other CPUs).

    fp32: two FMA units of the vector width, 2 operations each. Intel's AVX-512 cores have two
    512-bit units (some Xeon Silver and Bronze have one: half); AMD's Zen 4 runs AVX-512 on 256-bit
    units (family 25), Zen 5 (family 26) on 512-bit ones. bf16: AVX-512 BF16 doubles fp32, AMX-BF16
    does 1024 per cycle. int8: VNNI quadruples fp32, AMX-INT8 does 2048. Without these the reduced
    precision runs at fp32's rate or below."""
    have = set(features)
    if "AVX-512" in have:
        wide = not (vendor == "AuthenticAMD" and (family or 0) < 26)
        fp32, isa = (64.0, "AVX-512, two 512-bit FMA units") if wide else (32.0, "AVX-512 on 256-bit FMA units")
    elif "AVX2" in have and "FMA" in have:
        fp32, isa = 32.0, "AVX2, two 256-bit FMA units"
    else:
        return None
    if precision == "bf16":
        if "AMX-BF16" in have:
            return 1024.0, "AMX-BF16"
        if "AVX-512 BF16" in have:
            return 2 * fp32, f"AVX-512 BF16 ({isa})"
    elif precision == "int8":
        if "AMX-INT8" in have:
            return 2048.0, "AMX-INT8"
        if "AVX-512 VNNI" in have or "AVX-VNNI" in have:
            return 4 * fp32, f"VNNI ({isa})"
        return 2 * fp32, f"int8 without VNNI ({isa})"
    elif precision == "fp16" and "AVX-512 FP16" in have:
        return 2 * fp32, f"AVX-512 FP16 ({isa})"
    return fp32, isa


def theoretical_peak(threads: int | None, precision: str = "fp32") -> dict:
    """The CPU's peak GFLOP/s (GOP/s for int8) for `threads` cores: operations per cycle (from the
    instruction sets) x cores x clock. `gflops` is None where a factor is unknown."""
    vendor, family = cpu_vendor()
    rule = flop_per_cycle(cpu_features(), vendor, family, precision)
    ghz, source = max_clock_ghz()
    cores = min(threads or usable_cores() or 1, physical_cores() or usable_cores() or 1)
    out = {"precision": precision, "flop_per_cycle": rule[0] if rule else None, "isa": rule[1] if rule else None,
           "cores": cores, "ghz": ghz, "clock_source": source, "gflops": None}
    if rule and ghz:
        out["gflops"] = rule[0] * cores * ghz
    return out
