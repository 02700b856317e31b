"""TensorRT build options and the rules that hold before anything is built."""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from .api import Trt

PRECISIONS = ("fp32", "fp16", "int8")
BUILDERS = ("auto", "tensorrt", "rtx")
HARDWARE_LEVELS = ("ampere_plus", "same_compute_capability")
RTX_TARGETS = ("CURRENT", "SM75", "SM80", "SM86", "SM89", "SM120", "SM121")
# LayerNorm after attention overflows in fp16 (its variance of large activations), and Softmax loses
# its tail: keep them in fp32 unless the user says otherwise.
DEFAULT_FP32_LAYERS = ("LayerNormalization", "Softmax")


@dataclass
class TensorRTOptions:
    builder: str = "auto"  # auto | tensorrt | rtx
    precision: str = "fp32"
    # Kept in fp32 in fp16 builds: ONNX op types ("LayerNormalization") or glob patterns over node and
    # layer names ("*/ln_1/*", "*norm*") for graphs where LayerNorm was decomposed into primitives.
    fp32_layers: tuple[str, ...] = DEFAULT_FP32_LAYERS
    min_batch: int = 1
    opt_batch: int = 1
    max_batch: int = 1
    batch_buckets: tuple[int, ...] = ()  # one optimisation profile per bucket, on request
    workspace_mb: int = 1024
    optimization_level: int | None = None  # builder optimisation level 0..5
    timing_cache: str | None = None  # a folder; the file is keyed by GPU architecture and TRT version
    dla_core: int | None = None
    version_compatible: bool = False
    hardware_compatibility: str | None = None  # ampere_plus | same_compute_capability
    tf32: bool = False  # let fp32 layers use TF32 matmuls (faster, ~1e-3 relative error); off: fp32 means fp32
    rtx_targets: tuple[str, ...] = ()  # TensorRT-RTX compute capabilities (SM86, SM89, ...); () = its portable default
    calibration_images: str | None = None
    calibration_cache: str | None = None  # default: beside the engine, <engine>.calib.cache
    extra: dict = field(default_factory=dict)

    @property
    def dynamic(self) -> bool:
        return self.max_batch > self.min_batch or len(self.batch_buckets) > 1

    def profiles(self) -> list[tuple[int, int, int]]:
        """(min, opt, max) batch per profile: one, or one per bucket (min..b1, b1+1..b2, ...)."""
        if not self.batch_buckets:
            return [(self.min_batch, self.opt_batch, self.max_batch)]
        out, low = [], self.min_batch
        for high in self.batch_buckets:
            out.append((low, high, high))
            low = high + 1
        return out

    def keeps_fp32(self, op_type: str, name: str) -> bool:
        """Whether an ONNX node (or the TensorRT layer named after it) stays fp32 in an fp16 build."""
        for entry in self.fp32_layers:
            if entry == op_type or (any(c in entry for c in "*?[/") and fnmatch.fnmatchcase(name, entry)):
                return True
        return False

    def to_dict(self) -> dict:
        return asdict(self)


def validate(options: TensorRTOptions, trt: "Trt | None" = None, *, has_dla: bool | None = None,
             calibrated: bool = False) -> None:
    """Raise UsageError (exit 2) for options no build could honour.

    Without `trt` only the rules that hold for every TensorRT are checked; with it, also what that
    generation lacks (DLA, compatibility flags, optimisation levels, RTX targets). `calibrated`: int8
    ranges are already settled (calibration arrays given, or an ONNX with QuantizeLinear/DequantizeLinear
    pairs), so no --calibration-images are needed.
    """
    if options.builder not in BUILDERS:
        raise UsageError(f"--builder must be auto, tensorrt or rtx, got {options.builder!r}")
    if options.precision not in PRECISIONS:
        raise UsageError(f"TensorRT precision must be one of {', '.join(PRECISIONS)}, got {options.precision!r}")
    if not 1 <= options.min_batch <= options.opt_batch <= options.max_batch:
        raise UsageError(f"profile needs 1 <= min <= opt <= max, got min {options.min_batch}, "
                         f"opt {options.opt_batch}, max {options.max_batch}")
    buckets = list(options.batch_buckets)
    if buckets and (buckets != sorted(set(buckets)) or buckets[0] < options.min_batch
                    or buckets[-1] != options.max_batch):
        raise UsageError(f"batch buckets must rise strictly from the min batch {options.min_batch} and end at the "
                         f"max batch {options.max_batch}, got {buckets}")
    if options.workspace_mb <= 0:
        raise UsageError("--workspace-mb must be positive")
    if options.optimization_level is not None and not 0 <= options.optimization_level <= 5:
        raise UsageError("--optimization-level must be 0..5")
    if options.hardware_compatibility not in (None, *HARDWARE_LEVELS):
        raise UsageError("--hardware-compatibility must be ampere_plus or same_compute_capability")
    bad_targets = [t for t in options.rtx_targets if t.upper() not in RTX_TARGETS]
    if bad_targets:
        raise UsageError(f"--rtx-targets takes {', '.join(RTX_TARGETS)}, got {', '.join(bad_targets)}")
    if "CURRENT" in (t.upper() for t in options.rtx_targets) and len(options.rtx_targets) > 1:
        raise UsageError("--rtx-targets CURRENT (the GPU here) cannot be combined with other targets")
    if options.dla_core is not None:
        if options.dla_core < 0:
            raise UsageError("--dla-core must be >= 0")
        if options.dynamic:
            raise UsageError("DLA needs static shapes: drop the dynamic batch (min = max) to use --dla-core")
        if options.precision == "fp32":
            raise UsageError("DLA runs fp16 or int8 only: choose --precision fp16 or int8 with --dla-core")
        if options.hardware_compatibility:
            raise UsageError("hardware-compatible engines cannot use DLA: drop --hardware-compatibility")
    if options.precision == "int8" and not options.calibration_images and not calibrated:
        # Calibrating on noise gives meaningless ranges: int8 needs real images, whether they feed a
        # calibrator (TensorRT 8.6/10) or quantise a QDQ ONNX (TensorRT 11 / RTX, strongly typed).
        raise UsageError("int8 needs calibration images: give --calibration-images DIR (or a QDQ-quantised ONNX)")
    if trt is not None:
        _validate_for(options, trt)
    elif has_dla is False and options.dla_core is not None:
        raise UsageError("this TensorRT has no DLA support (DLA exists on Jetson Xavier/Orin)")


def _validate_for(options: TensorRTOptions, trt: "Trt") -> None:
    """What the TensorRT generation at hand cannot do."""
    if options.dla_core is not None and not trt.has_dla:
        raise UsageError(f"{trt.label} has no DLA support (DLA exists on Jetson Xavier/Orin with TensorRT)")
    if options.version_compatible and not trt.has_version_compatibility:
        raise UsageError(f"{trt.label} cannot build version-compatible engines (TensorRT 8.6 or later can)")
    if options.hardware_compatibility and not trt.has_hardware_compatibility:
        raise UsageError(f"{trt.label} cannot build hardware-compatible engines (TensorRT 8.6 or later can)")
    if options.optimization_level is not None and not trt.has_optimization_level:
        raise UsageError(f"{trt.label} has no builder optimisation levels (TensorRT 8.6 or later has)")
    if options.rtx_targets and not trt.has_compute_targets:
        raise UsageError(f"--rtx-targets needs the TensorRT-RTX builder, not {trt.label}")
