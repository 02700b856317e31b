"""Run an engine on an NVIDIA GPU: device buffers from torch, CUDA events for timing, a layer report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vitexport.backends.base import Profiled, Runner, timed_runs
from vitexport.backends.tensorrt import generations
from vitexport.backends.tensorrt.build import RTX_DEFAULT_TARGETS
from vitexport.core.environment import gpu_here
from vitexport.core.errors import BackendUnavailable, RuntimeFailure


def onnx_source(engine_path: Path, info: dict[str, Any]) -> str:
    """Where to rebuild from: the ONNX beside the engine if it is there, else the path recorded at build."""
    beside = Path(engine_path).with_name(info.get("onnx", "model.onnx"))
    if beside.exists() or not info.get("onnx_path"):
        return str(beside)
    return str(info["onnx_path"])


def check_runtime(trt: generations.Trt, info: dict[str, Any], onnx: str, gpu: tuple[str, str] | None) -> None:
    """Engines do not move between TensorRT flavours, versions or GPUs: refuse before deserialising.

    `gpu` is (name, compute capability) of the GPU here, or None when there is none.
    """
    built_flavour, built_version = info.get("flavour"), info.get("tensorrt_version")
    if built_flavour and built_flavour != trt.flavour:
        raise BackendUnavailable(f"this engine was built with {_label(built_flavour)} {built_version} but this "
                                 f"runtime is {trt.label}; rebuild from {onnx}")
    if built_version and built_version != trt.version and not _version_compatible(info, trt):
        raise BackendUnavailable(f"this engine was built with {_label(trt.flavour)} {built_version} but "
                                 f"{trt.version} is installed here; rebuild from {onnx}")
    if gpu is None:
        raise BackendUnavailable("running a TensorRT engine needs an NVIDIA GPU; none is visible here "
                                 "(building works without one)")
    name, capability = gpu
    if trt.flavour == "rtx":
        targets = info.get("compute_targets") or list(RTX_DEFAULT_TARGETS)
        if targets == ["CURRENT"]:
            targets = ["SM" + str(info.get("compute_capability", "")).replace(".", "")]
        here = "SM" + capability.replace(".", "")
        if here not in targets:
            raise BackendUnavailable(f"this TensorRT-RTX engine targets {', '.join(targets)} but {name} is {here}; "
                                     f"rebuild from {onnx} with a target that includes it")
        return
    built_cc, built_gpu = info.get("compute_capability"), info.get("gpu")
    level = info.get("hardware_compatibility") or (info.get("options") or {}).get("hardware_compatibility")
    if level == "ampere_plus":
        if float(capability) < 8.0:
            raise BackendUnavailable(f"this engine runs on Ampere or newer GPUs but {name} is compute capability "
                                     f"{capability}; rebuild from {onnx}")
        return
    if built_cc and built_cc != capability:
        raise BackendUnavailable(f"this engine was built for compute capability {built_cc} ({built_gpu}) but "
                                 f"{name} is {capability}; rebuild from {onnx}")
    if built_gpu and built_gpu != name and level != "same_compute_capability":
        raise BackendUnavailable(f"this engine was built on {built_gpu} but this GPU is {name}; rebuild from "
                                 f"{onnx} (or build with --hardware-compatibility same_compute_capability)")


def _label(flavour: str) -> str:
    return "TensorRT-RTX" if flavour == "rtx" else "TensorRT"


def _version_compatible(info: dict[str, Any], trt: generations.Trt) -> bool:
    """A version-compatible engine loads on the same or a later TensorRT of its major version."""
    if not (info.get("version_compatible") or (info.get("options") or {}).get("version_compatible")):
        return False
    built = tuple(int(p) for p in str(info["tensorrt_version"]).split(".")[:3] if p.isdigit())
    here = tuple(int(p) for p in trt.version.split(".")[:3] if p.isdigit())
    return built[:1] == here[:1] and here >= built


class TensorRTRunner(Runner):
    """An engine file and its sidecar's facts; the engine, contexts and stream exist between
    `__enter__` and `__exit__`."""

    def __init__(self, path: Path, info: dict[str, Any], builder: str = "auto"):
        self.path, self.info, self.builder = Path(path), info, builder
        self.engine = None
        self.last_gpu_ms: float | None = None  # device time of the last run, host copies excluded

    def open(self) -> None:
        info = self.info
        onnx = onnx_source(self.path, info)
        try:
            self.trt = generations.load(info.get("flavour") or self.builder)
        except BackendUnavailable as e:
            raise BackendUnavailable(f"{e}; rebuild from {onnx} where a TensorRT is installed") from None
        check_runtime(self.trt, info, onnx, gpu_here())
        import torch

        self.torch = torch
        m = self.trt.module
        self.runtime = m.Runtime(m.Logger(m.Logger.ERROR))
        self.engine = self.runtime.deserialize_cuda_engine(self.path.read_bytes())
        if self.engine is None:
            raise BackendUnavailable(f"{self.trt.label} could not load {self.path.name} on this GPU; rebuild "
                                     f"from {onnx}")
        self.io = generations.io_tensors(self.engine)
        self.profiles = [tuple(p) for p in info.get("profiles") or []]
        self.contexts: dict[int, Any] = {}
        self.stream = torch.cuda.Stream()
        self.provider = f"{self.trt.flavour}-{self.trt.version}"

    def close(self) -> None:
        self.contexts = {}
        self.engine = None

    def _context(self, batch: int):
        """The execution context of the profile covering `batch` (one context per profile)."""
        index = 0
        if self.profiles:
            index = next((i for i, (low, _, high) in enumerate(self.profiles) if low <= batch <= high), -1)
            if index < 0:
                raise RuntimeFailure(f"batch {batch} is outside the engine's profiles "
                                     f"{[list(p) for p in self.profiles]}")
        if index not in self.contexts:
            context = self.engine.create_execution_context()
            if index:
                generations.select_profile(context, index, self.stream.cuda_stream)
                self.stream.synchronize()
            self.contexts[index] = context
        return self.contexts[index]

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self.torch
        inputs = [t for t in self.io if t["mode"] == "input"]
        missing = [t["name"] for t in inputs if t["name"] not in feed]
        if missing:
            raise RuntimeFailure(f"the engine needs inputs {missing}")
        batch = int(np.asarray(feed[inputs[0]["name"]]).shape[0])
        context = self._context(batch)
        buffers: dict[str, Any] = {}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Everything on one stream: the copies in, the inference, the copies out, in that order.
        with torch.cuda.stream(self.stream):
            for t in inputs:
                host = np.ascontiguousarray(feed[t["name"]], dtype=generations.numpy_dtype(t["dtype"]))
                buffers[t["name"]] = torch.from_numpy(host).to("cuda", non_blocking=False)
                generations.set_input_shape(context, self.engine, t["name"], tuple(host.shape))
            for t in self.io:
                if t["mode"] == "output":
                    shape = generations.output_shape(context, self.engine, t["name"])
                    dtype = getattr(torch, generations.numpy_dtype(t["dtype"]))
                    buffers[t["name"]] = torch.empty(shape, dtype=dtype, device="cuda")
            start.record()
            generations.execute(context, self.engine, {n: b.data_ptr() for n, b in buffers.items()},
                        torch.cuda.current_stream().cuda_stream)
            end.record()
            outputs = {t["name"]: buffers[t["name"]].cpu().numpy() for t in self.io if t["mode"] == "output"}
        end.synchronize()
        self.last_gpu_ms = start.elapsed_time(end)
        return outputs

    profiler = "tensorrt"

    def profile(self, feed: dict[str, np.ndarray], runs: int, warmup: int) -> Profiled:
        """TensorRT's IProfiler on a fresh execution context (the timed one never carries it): each layer's
        time per run. Written against TensorRT's API; it needs an NVIDIA GPU to run."""
        from vitexport.backends.tensorrt.profiling import layer_profiler, layer_times, layer_types

        m = self.trt.module
        saved, self.contexts = self.contexts, {}
        try:
            batch = int(np.asarray(next(iter(feed.values()))).shape[0])
            context = self._context(batch)
            listener = layer_profiler(m)
            context.profiler = listener
            run_ms = timed_runs(lambda: self.run(feed), warmup + runs)
            inspector = self.engine.create_engine_inspector()
            inspector.execution_context = context
            types = layer_types(inspector.get_engine_information(m.LayerInformationFormat.JSON))
        finally:
            self.contexts = saved
        return Profiled(layer_times(listener.events, types, warmup, runs), run_ms[warmup:])

    def layer_report(self) -> dict[str, Any]:
        """Layers and their precisions, whether attention was fused, DLA vs GPU placement."""
        from vitexport.backends.tensorrt.layers import summarize

        m = self.trt.module
        inspector = self.engine.create_engine_inspector()
        if self.contexts:
            inspector.execution_context = next(iter(self.contexts.values()))
        return summarize(inspector.get_engine_information(m.LayerInformationFormat.JSON))
