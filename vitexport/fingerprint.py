"""Where a benchmark ran: enough to tell two machines apart, nothing that names the host or its user.

Library versions come from package metadata, so fingerprinting never imports (or initialises) torch,
ONNX Runtime or TensorRT itself.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from .bench import THREAD_ENV

# Distribution names (normalised: lower case, "-" for "_"); every "tensorrt*" distribution is added too,
# since TensorRT ships as tensorrt, tensorrt-cu12, tensorrt-rtx-cu12-bindings, ...
LIBRARIES = ("torch", "torchvision", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu",
             "onnxruntime-directml", "coremltools", "numpy", "vitexport")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _sysctl(name: str) -> str | None:
    if sys.platform != "darwin" or not shutil.which("sysctl"):
        return None
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


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


def usable_cores() -> int | None:
    """Cores this process may run on (a container or taskset can allow fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def gpus() -> tuple[list[str], str | None, str | None]:
    """GPU names, driver version and where they were read from.

    torch is asked only when something already imported it (fingerprinting must not pay for, or
    change, CUDA initialisation); nvidia-smi otherwise."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                return names, _smi_driver(), "torch"
        except Exception:  # a broken CUDA setup must not stop the report
            pass
    names, driver = _smi()
    return names, driver, "nvidia-smi" if names else None


def _smi() -> tuple[list[str], str | None]:
    if not shutil.which("nvidia-smi"):
        return [], None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return [], None
    if out.returncode != 0:
        return [], None
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    names = [r[0] for r in rows if r and r[0]]
    driver = next((r[1] for r in rows if len(r) > 1 and r[1]), None)
    return names, driver


def _smi_driver() -> str | None:
    return _smi()[1]


def versions() -> dict[str, str]:
    """Installed versions of the libraries a result depends on, from package metadata only."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in LIBRARIES or name.startswith("tensorrt"):
            found.setdefault(name, dist.version)
    return dict(sorted(found.items()))


def jetson_l4t() -> str | None:
    line = (_read("/etc/nv_tegra_release") or "").splitlines()
    return (line[0].strip() or None) if line else None


def fingerprint(threads: int | None = None) -> dict:
    """The machine, software and thread settings a report was measured with. No hostname, user
    name or path: reports are meant to be shared."""
    names, driver, source = gpus()
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
        "jetson_l4t": jetson_l4t(),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
