"""`bench --profile` for TensorRT: an IProfiler on a fresh execution context reports each layer's time
per run (what `trtexec --dumpProfile` prints); the engine inspector gives each layer's type where the
engine was built with detailed profiling verbosity, else the layer's name stands for its type (a fused
region's name keeps the layers it swallowed, which the classifier reads)."""

from __future__ import annotations

import json
from typing import Any

from vitexport.backends.base import OpTime, per_run


def layer_profiler(trt_module: Any):
    """An IProfiler that keeps every (layer name, ms) TensorRT reports, run after run."""

    class LayerTimes(trt_module.IProfiler):
        def __init__(self) -> None:
            trt_module.IProfiler.__init__(self)
            self.events: list[tuple[str, float]] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.events.append((layer_name, float(ms)))

    return LayerTimes()


def layer_types(engine_json: str) -> dict[str, str]:
    """Layer name -> LayerType from the inspector's JSON (empty where the engine recorded names only)."""
    layers = json.loads(engine_json).get("Layers", [])
    return {str(layer.get("Name", "")): str(layer.get("LayerType", "")) for layer in layers if isinstance(layer, dict)}


def layer_times(events: list[tuple[str, float]], types: dict[str, str], skip: int, runs: int) -> list[OpTime]:
    """Each layer's mean ms per run over the runs after the first `skip` (a run reports every layer once)."""
    per = len(events) // (skip + runs) if events else 0
    kept = events[per * skip:]
    return per_run(((name, layer_type(name, types), ms) for name, ms in kept), runs)


def layer_type(name: str, types: dict[str, str]) -> str:
    """The inspector's type of a layer; without one, a fused region is "Myelin" (the classifier then reads
    its name) and any other layer is known by its name."""
    if types.get(name):
        return types[name]
    lowered = name.lower()
    return "Myelin" if "myelin" in lowered or "foreignnode" in lowered else name
