"""What this machine is and has, and how files are written: one place for library versions, GPU and
Jetson probes, timestamps, digests and atomic writes, shared by sidecars, fingerprints and doctor.

Versions come from package metadata, so asking never imports (or initialises) torch, ONNX Runtime
or TensorRT.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

# What every result depends on, whatever the backend; each backend adds its own `tool_packages`.
# Names are distributions, normalised (lower case, "-"); a trailing "*" matches a prefix
# (TensorRT ships as tensorrt, tensorrt-cu12, tensorrt-rtx-cu12-bindings, ...).
BASE_PACKAGES = ("vitexport", "torch", "torchvision", "numpy", "safetensors", "timm", "transformers")

TEGRA_RELEASE = Path("/etc/nv_tegra_release")
# L4T major -> JetPack major (JetPack 6 ships TensorRT 10 on L4T R36; JetPack 5 TensorRT 8.5/8.6 on R35).
JETPACK_FOR_L4T = {36: "6", 35: "5", 34: "5", 32: "4"}


def versions(packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of `packages` (names; a trailing `*` matches a prefix), sorted by name."""
    return dict(_versions(tuple(packages), _installed_state()))


def _installed_state() -> tuple:
    """What changes when a package is installed, upgraded or removed: the import path and each of its
    folders' modification time (a distribution's metadata folder is made or removed in one of them)."""
    def mtime(folder: str) -> int | None:
        try:
            return os.stat(folder or ".").st_mtime_ns
        except OSError:
            return None

    return tuple((folder, mtime(folder)) for folder in sys.path)


@functools.lru_cache(maxsize=16)
def _versions(packages: tuple[str, ...], installed: tuple) -> tuple[tuple[str, str], ...]:
    """Every export records these (its sidecar's `tools`), and reading them parses the metadata of
    every installed distribution (0.1 to 0.2 s with a few hundred): read once per installed state."""
    exact = {p for p in packages if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in packages if p.endswith("*"))
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in exact or (prefixes and name.startswith(prefixes)):
            found.setdefault(name, dist.version)
    return tuple(sorted(found.items()))


def total_memory_bytes() -> int | None:
    """Physical memory of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory_bytes() -> int | None:
    """Memory free for new work now (Linux; None where the OS does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def environment_threads() -> int | None:
    """The thread count OMP_NUM_THREADS asks for (its first level where it lists several), or None
    where it is unset or not a positive number."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- GPUs and Jetson -------------------------------------------------------------------------------


def gpus() -> tuple[list[str], str | None, str | None]:
    """GPU names, driver version and where they were read from.

    torch is asked only when something already imported it (a probe must not pay for, or change,
    CUDA initialisation); nvidia-smi otherwise."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                return names, nvidia_smi()[1], "torch"
        except Exception:  # a broken CUDA setup must not stop the report
            pass
    names, driver = nvidia_smi()
    return names, driver, "nvidia-smi" if names else None


def nvidia_smi() -> tuple[list[str], str | None]:
    """(GPU names, driver version) from nvidia-smi; ([], None) without it."""
    out = run_quietly(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if out is None:
        return [], None
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    names = [r[0] for r in rows if r and r[0]]
    driver = next((r[1] for r in rows if len(r) > 1 and r[1]), None)
    return names, driver


def gpu_here() -> tuple[str, str] | None:
    """(name, compute capability) of the first CUDA device torch sees, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0), "%d.%d" % torch.cuda.get_device_capability(0)


def gpu_facts() -> dict[str, Any]:
    """The GPU visible here and torch's CUDA version; None fields on a CPU-only machine."""
    facts: dict[str, Any] = {"gpu": None, "compute_capability": None, "torch_cuda": None}
    try:
        import torch
    except ImportError:
        return facts
    facts["torch_cuda"] = torch.version.cuda
    here = gpu_here()
    if here:
        facts["gpu"], facts["compute_capability"] = here
    return facts


def jetson_release(release_file: Path | None = None) -> str | None:
    """The first line of /etc/nv_tegra_release (None off a Jetson)."""
    try:
        line = (release_file or TEGRA_RELEASE).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    return line.strip() or None


def jetson_facts(release_file: Path | None = None) -> dict[str, Any]:
    """L4T release and JetPack major (None off a Jetson)."""
    line = jetson_release(release_file)
    if line is None:
        return {"l4t": None, "jetpack": None}
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", line)
    if not match:
        return {"l4t": line.lstrip("# "), "jetpack": None}
    major = int(match.group(1))
    return {"l4t": f"{major}.{match.group(2)}", "jetpack": JETPACK_FOR_L4T.get(major)}


def jetson_power() -> dict[str, Any]:
    """Power mode (`nvpmodel -q`) and whether clocks are pinned at their maximum (`jetson_clocks
    --show`): each changes a Jetson's latency by multiples. Probed only on a Jetson; None where a
    tool is missing or refuses (jetson_clocks wants root)."""
    if jetson_release() is None:
        return {"power_mode": None, "clocks": None}
    return {"power_mode": nvpmodel_mode(run_quietly(["nvpmodel", "-q"])),
            "clocks": clock_state(run_quietly(["jetson_clocks", "--show"]))}


def nvpmodel_mode(text: str | None) -> str | None:
    """The mode's name from 'NV Power Mode: MAXN' (names are unique on a board; the number after it is not
    the same mode on another board)."""
    match = re.search(r"NV Power Mode\s*:\s*(\S[^\n]*)", text or "")
    return match.group(1).strip() if match else None


def clock_state(text: str | None) -> str | None:
    """'locked' when every CPU and the GPU run at a fixed frequency (MinFreq == MaxFreq, what
    jetson_clocks sets), 'dynamic' when one may scale, None when the output says neither."""
    fixed = []
    for line in (text or "").splitlines():
        name = line.split(":", 1)[0].split()[0] if line.strip() else ""
        low, high = re.search(r"MinFreq=(\d+)", line), re.search(r"MaxFreq=(\d+)", line)
        online = "Online=0" not in line  # an offline core in a low power mode keeps no clock
        if low and high and online and (name.startswith("cpu") or name == "GPU"):
            fixed.append(low.group(1) == high.group(1))
    if not fixed:
        return None
    return "locked" if all(fixed) else "dynamic"


def run_quietly(command: list[str], timeout: float = 10) -> str | None:
    """stdout of a probe command, or None when it is missing, fails or hangs."""
    if not shutil.which(command[0]):
        return None
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


# --- files -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_loggers(*names: str, level: int = 40):
    """Libraries' Python loggers raised to `level` (default ERROR) for a block, then put back: they
    log whole stack traces or deprecation chatter about things vitexport reports in one line itself."""
    import logging

    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, previous in zip(loggers, levels):
            lg.setLevel(previous)


class NotARegularFile(OSError):
    """A path that should be a file is a FIFO, a device or a folder: reading it could block forever."""


def sha256_array(array) -> str:
    """A digest of an array's values, shape and dtype (memo keys of what an export was made from:
    calibration images, say)."""
    return hashlib.sha256(array.tobytes()).hexdigest() + str(array.shape) + str(array.dtype)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The file's sha256. Opened without blocking and checked on the open descriptor, so a FIFO or
    device put where an artifact or its weights should be raises NotARegularFile instead of hanging."""
    import stat

    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(f"{path} is not a regular file")
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
