"""Backend registry: name -> package. Adding a backend is one line here (see backends/base.py for
what its package provides). Packages are imported on first use and their `__init__` stays light,
so the CLI can list every backend without importing torch.

The registry, the spec (base.py) and the code several backends share (onnx_common/, coreml_common/,
int8_search.py, torch_profile.py) may import core, models and verify. The plug-ins (one package each, loaded by name
from here) may import every stage below the API and the CLI, but never another plug-in: what one
needs of another goes through `get(name)` (an upstream's options, its files) or lives in the shared
code."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from vitexport.core.errors import UsageError

if TYPE_CHECKING:
    from vitexport.backends.base import Backend, BenchTarget

REGISTRY: dict[str, str] = {
    "torch": "vitexport.backends.eager",
    "torchscript": "vitexport.backends.torchscript",
    "onnx": "vitexport.backends.onnx",
    "coreml": "vitexport.backends.coreml",
    "tensorrt": "vitexport.backends.tensorrt",
    "executorch": "vitexport.backends.executorch",
    "openvino": "vitexport.backends.openvino",
    "litert": "vitexport.backends.litert",
}


def register(name: str, module: str) -> None:
    """Add a backend at run time (a plugin, or a test's fake backend)."""
    REGISTRY[name] = module


def get(name: str) -> "Backend":
    if name not in REGISTRY:
        raise UsageError(f"unknown backend {name!r} (known: {', '.join(REGISTRY)})")
    return importlib.import_module(REGISTRY[name]).BACKEND


def all_backends() -> list["Backend"]:
    return [get(name) for name in REGISTRY]


def exporters() -> list["Backend"]:
    """Backends that write an artifact (every one but the eager reference)."""
    return [be for be in all_backends() if be.exports]


def bench_targets() -> dict[str, "BenchTarget"]:
    """Every backend's bench targets by name ("torch", "onnxruntime-cuda", ...)."""
    return {t.name: t for be in all_backends() for t in be.bench_targets()}


def bench_target_name(name: str) -> str:
    """A bench target by its own name, or by the name of the backend that exports what it times, where
    that is not a target itself: `onnx` (the export's name) is ONNX Runtime on the CPU, `onnxruntime`.
    The first target a backend lists is its default."""
    targets = bench_targets()
    if name in targets:
        return name
    return next((t.name for t in targets.values() if t.backend == name), name)


def tool_packages() -> tuple[str, ...]:
    """The one list of distributions whose versions sidecars, fingerprints and doctor report: what
    every result depends on, and what each registered backend adds."""
    from vitexport.core.environment import BASE_PACKAGES

    names = list(BASE_PACKAGES)
    for be in all_backends():
        names += [n for n in be.tool_packages if n not in names]
    return tuple(names)


def tool_versions() -> dict[str, str]:
    """Installed versions of `tool_packages()`, sorted by name."""
    from vitexport.core.environment import versions

    return versions(tool_packages())
