"""What an engine is tied to: the TensorRT that built it, the GPU (or targets), CUDA, JetPack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TEGRA_RELEASE = Path("/etc/nv_tegra_release")
# L4T major -> JetPack major (JetPack 6 ships TensorRT 10 on L4T R36; JetPack 5 TensorRT 8.5/8.6 on R35).
JETPACK_FOR_L4T = {36: "6", 35: "5", 34: "5", 32: "4"}


def gpu_facts() -> dict[str, Any]:
    """The GPU visible here, when torch can see one; None fields on a CPU-only (ahead-of-time) build."""
    facts: dict[str, Any] = {"gpu": None, "compute_capability": None, "torch_cuda": None}
    try:
        import torch
    except ImportError:
        return facts
    facts["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["compute_capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
    return facts


def jetson_facts(release_file: Path = TEGRA_RELEASE) -> dict[str, Any]:
    """L4T release and JetPack major from /etc/nv_tegra_release (None off a Jetson)."""
    try:
        line = release_file.read_text().splitlines()[0]
    except (OSError, IndexError):
        return {"l4t": None, "jetpack": None}
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", line)
    if not match:
        return {"l4t": line.strip().lstrip("# "), "jetpack": None}
    major = int(match.group(1))
    return {"l4t": f"{major}.{match.group(2)}", "jetpack": JETPACK_FOR_L4T.get(major)}


def sha256(path: Path) -> str:
    from ..sources import sha256_file

    return sha256_file(path)
