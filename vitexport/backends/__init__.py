"""Backend registry: name -> module. Modules are imported on first use so the CLI starts fast."""

from __future__ import annotations

import importlib

from ..errors import UsageError

# name -> module path; each module exposes a `BACKEND` object following backends.base.Backend.
REGISTRY: dict[str, str] = {
    "torch": "vitexport.backends.eager",
    "torchscript": "vitexport.backends.torchscript",
    "onnx": "vitexport.backends.onnx",
    "coreml": "vitexport.backends.coreml",
    "tensorrt": "vitexport.backends.tensorrt",
}


def get(name: str):
    if name not in REGISTRY:
        raise UsageError(f"unknown backend {name!r} (known: {', '.join(REGISTRY)})")
    return importlib.import_module(REGISTRY[name]).BACKEND


def for_artifact(path) -> str:
    """The backend that owns an artifact, by its suffix."""
    from pathlib import Path

    suffix = Path(path).suffix
    for name in REGISTRY:
        if get(name).suffix == suffix:
            return name
    raise UsageError(f"no backend handles {suffix or 'suffix-less'} files ({path})")
