"""The JSON written next to every artifact: everything needed to re-verify it later."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .errors import UsageError

SCHEMA = "vitexport.sidecar/1"
TOOLS = ("vitexport", "torch", "torchvision", "timm", "onnx", "onnxruntime", "onnxruntime-gpu", "onnxscript",
         "coremltools", "tensorrt", "tensorrt-rtx-cu12-bindings", "numpy")


def path_for(artifact: Path) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + ".json")


def tool_versions() -> dict[str, str]:
    found = {}
    for name in TOOLS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write(path: Path, record: dict[str, Any]) -> None:
    """Write atomically so a crash never leaves a truncated sidecar."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"schema": SCHEMA, **record}, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read(artifact: Path) -> dict[str, Any]:
    artifact = Path(artifact)
    if not artifact.exists():
        raise UsageError(f"artifact not found: {artifact}")
    side = path_for(artifact)
    if not side.is_file():
        raise UsageError(f"no sidecar {side.name} next to {artifact.name}: cannot tell what to verify against")
    try:
        record = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise UsageError(f"sidecar {side} is not valid JSON: {e}") from None
    if record.get("schema") != SCHEMA:
        raise UsageError(f"sidecar {side} has schema {record.get('schema')!r}, expected {SCHEMA}")
    return record


def digest(artifact: Path, extra_files: list[Path] = ()) -> str:
    """sha256 over an artifact: a file, or every file of a package directory, plus external data."""
    import hashlib

    from .sources import sha256_file

    artifact = Path(artifact)
    files = sorted(p for p in artifact.rglob("*") if p.is_file()) if artifact.is_dir() else [artifact]
    files += [Path(f) for f in extra_files if Path(f).exists()]
    if len(files) == 1 and not artifact.is_dir():
        return sha256_file(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(artifact) if artifact.is_dir() and f.is_relative_to(artifact) else f.name).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()
