"""One face for the TensorRT generations vitexport builds with and runs on.

- tensorrt 8.6: precision flags (BuilderFlag.FP16 / INT8), EXPLICIT_BATCH still asked for, calibrators.
- tensorrt 10.x: the same flags; explicit batch is implied (the flag is deprecated, then gone).
- tensorrt 11.x and TensorRT-RTX: strongly typed networks only; the precision is the ONNX's own.
From 8.5 on, I/O goes by tensor name (num_io_tensors / get_tensor_name / set_tensor_address /
execute_async_v3); older runtimes go by binding index (num_bindings / execute_async_v2). Every
question about "which generation is this" is answered here from the names a module exposes, so the
rest of the code (and the tests, with fake modules) never look at version numbers.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from vitexport.core.errors import BackendUnavailable, RuntimeFailure

FLAVOURS = {"tensorrt": "tensorrt", "rtx": "tensorrt_rtx_bindings"}
# The wheels' distribution names carry the CUDA major they were built for.
DISTRIBUTIONS = {
    "tensorrt": ("tensorrt-cu13-libs", "tensorrt-cu12-libs", "tensorrt-cu11-libs", "tensorrt-libs", "tensorrt"),
    "rtx": ("tensorrt-rtx-cu13-libs", "tensorrt-rtx-cu12-libs"),
}
# TensorRT data type names (str(DataType.X) ends in these) -> numpy dtype names.
NUMPY_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "UINT8": "uint8",
                "INT32": "int32", "INT64": "int64", "BOOL": "bool"}


@dataclass(frozen=True)
class Trt:
    module: Any
    flavour: str  # "tensorrt" or "rtx"
    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def label(self) -> str:
        return f"{'TensorRT-RTX' if self.flavour == 'rtx' else 'TensorRT'} {self.version}"

    @property
    def precision_flags(self) -> bool:
        """Whether the builder still takes --fp16/--int8 style flags (gone in TRT 11 and RTX)."""
        return hasattr(self.module.BuilderFlag, "FP16")

    @property
    def strongly_typed(self) -> bool:
        """Builds take their precision from the ONNX's types: fp16 means an fp16 ONNX, int8 a QDQ one."""
        return not self.precision_flags

    @property
    def has_calibrators(self) -> bool:
        return hasattr(self.module, "IInt8EntropyCalibrator2") and hasattr(self.module.BuilderFlag, "INT8")

    @property
    def has_dla(self) -> bool:
        device = getattr(self.module, "DeviceType", None)
        return device is not None and hasattr(device, "DLA") and self.flavour == "tensorrt"

    @property
    def has_version_compatibility(self) -> bool:
        # TensorRT-RTX lists the flag but ships no lean runtime to embed; its engines move by JIT instead.
        return hasattr(self.module.BuilderFlag, "VERSION_COMPATIBLE") and self.flavour == "tensorrt"

    @property
    def has_hardware_compatibility(self) -> bool:
        return hasattr(self.module, "HardwareCompatibilityLevel")

    @property
    def has_optimization_level(self) -> bool:
        config = getattr(self.module, "IBuilderConfig", None)
        return config is not None and hasattr(config, "builder_optimization_level")

    @property
    def has_compute_targets(self) -> bool:
        """TensorRT-RTX builds ahead of time for a list of compute capabilities."""
        return hasattr(self.module, "ComputeCapability")

    def cuda_major(self) -> str | None:
        """The CUDA major the installed wheels were built for (None for a system install)."""
        from importlib import metadata

        for dist in DISTRIBUTIONS.get(self.flavour, ()):
            try:
                metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
            return dist.split("-cu")[1].split("-")[0] if "-cu" in dist else None
        return None


def load(builder: str = "auto") -> Trt:
    """Import the requested TensorRT flavour; auto prefers full TensorRT, then TensorRT-RTX."""
    if builder not in ("auto", *FLAVOURS):
        raise BackendUnavailable(f"unknown TensorRT builder {builder!r}")
    order = list(FLAVOURS) if builder == "auto" else [builder]
    errors = []
    for flavour in order:
        try:
            # The RTX bindings import their libraries' wheel (tensorrt_rtx_libs) themselves, which
            # preloads the shared objects; nothing to do with ctypes here.
            module = importlib.import_module(FLAVOURS[flavour])
        except (ImportError, OSError) as e:  # OSError: the wheel is there but a CUDA library is not
            errors.append(f"{FLAVOURS[flavour]}: {e}")
            continue
        return Trt(module, flavour, str(module.__version__))
    raise BackendUnavailable("no TensorRT here (" + "; ".join(errors) + "); install TensorRT on the GPU machine or "
                             "pip install 'vitexport[tensorrt-rtx]' to build ahead of time")


# --- building -----------------------------------------------------------------------------------------


def network_flags(trt: Trt, strongly_typed: bool) -> int:
    m = trt.module
    flags = 0
    names = m.NetworkDefinitionCreationFlag.__members__
    if "EXPLICIT_BATCH" in names and trt.flavour == "tensorrt" and trt.major < 10:
        flags |= 1 << int(m.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)  # implicit batch is gone from TRT 10 on
    if strongly_typed and "STRONGLY_TYPED" in names:
        flags |= 1 << int(m.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return flags


def set_workspace(trt: Trt, config, limit_bytes: int) -> None:
    if hasattr(config, "set_memory_pool_limit"):
        config.set_memory_pool_limit(trt.module.MemoryPoolType.WORKSPACE, limit_bytes)
    else:  # TensorRT < 8.4
        config.max_workspace_size = limit_bytes


def set_compute_targets(trt: Trt, config, targets: tuple[str, ...]) -> list[str]:
    """RTX: the compute capabilities to build for (e.g. SM86, SM89); empty keeps the portable default."""
    if not targets:
        return []
    config.num_compute_capabilities = len(targets)
    for i, name in enumerate(targets):
        config.set_compute_capability(getattr(trt.module.ComputeCapability, name.upper()), i)
    return [name.upper() for name in targets]


# --- I/O and running ----------------------------------------------------------------------------------


def _name(enum_value) -> str:
    return str(enum_value).split(".")[-1]


def io_tensors(obj) -> list[dict]:
    """Name, mode, shape and dtype of every I/O tensor of an engine (either API) or a network definition."""
    if hasattr(obj, "num_io_tensors"):  # engine, TensorRT >= 8.5
        out = []
        for i in range(obj.num_io_tensors):
            name = obj.get_tensor_name(i)
            out.append({"name": name, "mode": _name(obj.get_tensor_mode(name)).lower(),
                        "shape": list(obj.get_tensor_shape(name)), "dtype": _name(obj.get_tensor_dtype(name))})
        return out
    if hasattr(obj, "num_bindings"):  # engine, TensorRT < 8.5: one binding per tensor and profile
        per_profile = obj.num_bindings // max(1, getattr(obj, "num_optimization_profiles", 1))
        return [{"name": obj.get_binding_name(i), "mode": "input" if obj.binding_is_input(i) else "output",
                 "shape": list(obj.get_binding_shape(i)), "dtype": _name(obj.get_binding_dtype(i))}
                for i in range(per_profile)]
    tensors = [(obj.get_input(i), "input") for i in range(obj.num_inputs)]
    tensors += [(obj.get_output(i), "output") for i in range(obj.num_outputs)]
    return [{"name": t.name, "mode": mode, "shape": list(t.shape), "dtype": _name(t.dtype)} for t, mode in tensors]


def numpy_dtype(trt_dtype: str) -> str:
    try:
        return NUMPY_DTYPES[trt_dtype]
    except KeyError:
        raise RuntimeFailure(f"TensorRT tensor type {trt_dtype} has no numpy equivalent here") from None


def select_profile(context, index: int, stream_handle: int) -> None:
    if hasattr(context, "set_optimization_profile_async"):
        context.set_optimization_profile_async(index, stream_handle)
    else:
        context.active_optimization_profile = index


def set_input_shape(context, engine, name: str, shape: tuple[int, ...]) -> None:
    if hasattr(context, "set_input_shape"):
        ok = context.set_input_shape(name, shape)
    else:
        ok = context.set_binding_shape(engine.get_binding_index(name), shape)
    if ok is False:
        raise RuntimeFailure(f"TensorRT refused the shape {list(shape)} for {name} (outside the engine's profile)")


def output_shape(context, engine, name: str) -> tuple[int, ...]:
    if hasattr(context, "get_tensor_shape"):
        return tuple(context.get_tensor_shape(name))
    return tuple(context.get_binding_shape(engine.get_binding_index(name)))


def execute(context, engine, addresses: dict[str, int], stream_handle: int) -> None:
    """Enqueue one inference on the stream; `addresses` maps each I/O tensor name to a device pointer."""
    if hasattr(context, "execute_async_v3"):
        for name, pointer in addresses.items():
            context.set_tensor_address(name, pointer)
        ok = context.execute_async_v3(stream_handle)
    else:  # binding slots, in the engine's binding order
        bindings = [addresses.get(engine.get_binding_name(i), 0) for i in range(engine.num_bindings)]
        ok = context.execute_async_v2(bindings, stream_handle)
    if not ok:
        raise RuntimeFailure("TensorRT failed to enqueue the inference (see its messages above)")
