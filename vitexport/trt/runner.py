"""Run an engine on an NVIDIA GPU: device buffers from torch, CUDA events for timing, a layer report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailable
from . import api


def check_runtime(trt: api.Trt, sidecar: dict[str, Any], onnx_name: str) -> None:
    """Engines do not move between TensorRT versions or GPUs: say so before deserialising."""
    info = sidecar.get("info", {})
    built = (info.get("flavour"), info.get("tensorrt_version"))
    if built != (trt.flavour, trt.version) and not info.get("options", {}).get("version_compatible"):
        raise BackendUnavailable(f"this engine was built with {built[0]} {built[1]} but {trt.flavour} {trt.version} is "
                                 f"installed here; rebuild from {onnx_name}")
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailable("running a TensorRT engine needs an NVIDIA GPU; none is visible here")
    capability = "%d.%d" % torch.cuda.get_device_capability(0)
    if info.get("compute_capability") and info["compute_capability"] != capability \
            and not info.get("options", {}).get("hardware_compatibility"):
        raise BackendUnavailable(f"this engine was built for compute capability {info['compute_capability']} but this "
                                 f"GPU is {capability}; rebuild from {onnx_name}")


class TensorRTRunner:
    def __init__(self, path: Path, sidecar: dict[str, Any], builder: str = "auto"):
        import torch

        self.torch = torch
        info = sidecar.get("info", {})
        self.trt = api.load(info.get("flavour", builder))
        onnx_name = str(Path(path).with_name(info.get("onnx", "model.onnx")))
        check_runtime(self.trt, sidecar, onnx_name)
        m = self.trt.module
        self.runtime = m.Runtime(m.Logger(m.Logger.ERROR))
        self.engine = self.runtime.deserialize_cuda_engine(Path(path).read_bytes())
        if self.engine is None:
            raise BackendUnavailable(f"TensorRT could not load {Path(path).name} on this runtime; rebuild from {onnx_name}")
        self.context = self.engine.create_execution_context()
        self.io = api.io_tensors(self.engine)
        self.stream = torch.cuda.Stream()
        self.provider = f"{self.trt.flavour}-{self.trt.version}"
        self.last_gpu_ms: float | None = None

    def __enter__(self) -> "TensorRTRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.context = self.engine = None

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self.torch
        buffers = {}
        for tensor in self.io:
            if tensor["mode"] == "input":
                x = torch.from_numpy(np.ascontiguousarray(feed[tensor["name"]])).cuda()
                self.context.set_input_shape(tensor["name"], tuple(x.shape))
                buffers[tensor["name"]] = x
        for tensor in self.io:
            if tensor["mode"] == "output":
                shape = tuple(self.context.get_tensor_shape(tensor["name"]))
                buffers[tensor["name"]] = torch.empty(shape, dtype=torch.float32, device="cuda")
        for name, buffer in buffers.items():
            self.context.set_tensor_address(name, buffer.data_ptr())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record(self.stream)
            self.context.execute_async_v3(self.stream.cuda_stream)
            end.record(self.stream)
        end.synchronize()
        self.last_gpu_ms = start.elapsed_time(end)  # device time, apart from host copies
        return {t["name"]: buffers[t["name"]].cpu().numpy() for t in self.io if t["mode"] == "output"}

    def layer_report(self) -> dict[str, Any]:
        """Layers with their precisions, whether attention was fused, and DLA/GPU placement."""
        m = self.trt.module
        inspector = self.engine.create_engine_inspector()
        layers = json.loads(inspector.get_engine_information(m.LayerInformationFormat.JSON)).get("Layers", [])
        names = [layer if isinstance(layer, str) else layer.get("Name", "") for layer in layers]
        return {"layers": len(layers),
                "attention_fused": any("mha" in n.lower() or "attention" in n.lower() for n in names),
                "dla_layers": sum("dla" in n.lower() for n in names), "detail": layers}
