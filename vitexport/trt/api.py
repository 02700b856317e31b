"""One face for the TensorRT generations vitexport builds with.

- tensorrt 8.6 / 10.x: precision flags (BuilderFlag.FP16 / INT8) on a weakly typed network.
- tensorrt 11.x and TensorRT-RTX: strongly typed networks only; the precision is the ONNX's own.
Both use the name-based I/O API (num_io_tensors / get_tensor_name / set_tensor_address).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import BackendUnavailable

FLAVOURS = {"tensorrt": "tensorrt", "rtx": "tensorrt_rtx_bindings"}


@dataclass(frozen=True)
class Trt:
    module: Any
    flavour: str  # "tensorrt" or "rtx"
    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def precision_flags(self) -> bool:
        """Whether the builder still takes --fp16/--int8 style flags (gone in TRT 11 and RTX)."""
        return hasattr(self.module.BuilderFlag, "FP16")

    @property
    def has_calibrators(self) -> bool:
        return hasattr(self.module, "IInt8EntropyCalibrator2") and self.precision_flags

    @property
    def has_dla(self) -> bool:
        return hasattr(self.module, "DeviceType") and hasattr(self.module.DeviceType, "DLA")


def load(builder: str = "auto") -> Trt:
    """Import the requested TensorRT flavour; auto prefers full TensorRT, then TensorRT-RTX."""
    order = ["tensorrt", "rtx"] if builder == "auto" else [builder]
    errors = []
    for flavour in order:
        try:
            module = importlib.import_module(FLAVOURS[flavour])
        except ImportError as e:
            errors.append(f"{FLAVOURS[flavour]}: {e}")
            continue
        return Trt(module, flavour, str(module.__version__))
    raise BackendUnavailable("no TensorRT here (" + "; ".join(errors) + "); install TensorRT on the GPU machine or "
                             "pip install 'vitexport[tensorrt-rtx]' to build ahead of time")


def network_flags(trt: Trt, strongly_typed: bool) -> int:
    m = trt.module
    flags = 0
    names = m.NetworkDefinitionCreationFlag.__members__
    if "EXPLICIT_BATCH" in names and trt.major < 10:  # implicit batch is gone from TRT 10 on
        flags |= 1 << int(m.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    if strongly_typed and "STRONGLY_TYPED" in names:
        flags |= 1 << int(m.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return flags


def set_workspace(trt: Trt, config, limit_bytes: int) -> None:
    if hasattr(config, "set_memory_pool_limit"):
        config.set_memory_pool_limit(trt.module.MemoryPoolType.WORKSPACE, limit_bytes)
    else:  # TensorRT < 8.4
        config.max_workspace_size = limit_bytes


def io_tensors(engine_or_network) -> list[dict]:
    """Name, mode, shape and dtype of every I/O tensor (engine) or input/output (network)."""
    obj = engine_or_network
    if hasattr(obj, "num_io_tensors"):
        out = []
        for i in range(obj.num_io_tensors):
            name = obj.get_tensor_name(i)
            out.append({"name": name, "mode": str(obj.get_tensor_mode(name)).split(".")[-1].lower(),
                        "shape": list(obj.get_tensor_shape(name)), "dtype": str(obj.get_tensor_dtype(name)).split(".")[-1]})
        return out
    tensors = [(obj.get_input(i), "input") for i in range(obj.num_inputs)]
    tensors += [(obj.get_output(i), "output") for i in range(obj.num_outputs)]
    return [{"name": t.name, "mode": mode, "shape": list(t.shape), "dtype": str(t.dtype).split(".")[-1]}
            for t, mode in tensors]
