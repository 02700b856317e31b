"""Where a benchmark ran: enough to tell two machines apart, nothing that names the host."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from datetime import datetime, timezone
from importlib import metadata

LIBRARIES = ("torch", "torchvision", "onnx", "onnxruntime", "onnxruntime-gpu", "coremltools", "tensorrt",
             "tensorrt-rtx-cu12-bindings", "numpy", "vitexport")


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def fingerprint(threads: int | None = None) -> dict:
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpus": gpus() or ["none"],
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "libraries": versions(),
        "threads": threads,
        "jetson_l4t": _l4t(),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _l4t() -> str | None:
    try:
        return open("/etc/nv_tegra_release").readline().strip() or None
    except OSError:
        return None
