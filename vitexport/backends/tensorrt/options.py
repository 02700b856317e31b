"""TensorRT build options and the rules that hold before anything is built."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vitexport.backends.base import ExportOptions
from vitexport.backends.onnx_common.exporters import EXPORTERS
from vitexport.core.errors import UsageError
from vitexport.core.options import check_fields, option

if TYPE_CHECKING:
    from vitexport.backends.tensorrt.generations import Trt

PRECISIONS = ("fp32", "fp16", "int8")
BUILDERS = ("auto", "tensorrt", "rtx")
HARDWARE_LEVELS = ("ampere_plus", "same_compute_capability")
RTX_TARGETS = ("CURRENT", "SM75", "SM80", "SM86", "SM89", "SM120", "SM121")
# LayerNorm after attention overflows in fp16 (its variance of large activations), and Softmax loses
# its tail: keep them in fp32 unless the user says otherwise.
DEFAULT_FP32_LAYERS = ("LayerNormalization", "Softmax")


@dataclass(frozen=True)
class TensorRTOptions(ExportOptions):
    """Build options. The ONNX the engine builds from is exported (and verified) with `opset` and
    `exporter` first; `--dynamic-batch` or a `--max-batch` above `--min-batch` makes the profile dynamic."""

    builder: str = option("auto", "Which TensorRT builds: tensorrt (standard, on the target), rtx (TensorRT-RTX, "
                                  "ahead of time without a GPU), or auto: tensorrt, then rtx.", choices=BUILDERS)
    precision: str = option("fp32", "What the artifact computes in.", choices=PRECISIONS)
    # Kept in fp32 in fp16 builds: ONNX op types ("LayerNormalization") or glob patterns over node and
    # layer names ("*/ln_1/*", "*norm*") for graphs where LayerNorm was decomposed into primitives.
    fp32_layers: tuple[str, ...] = option(DEFAULT_FP32_LAYERS, "Kept in fp32 in fp16/int8 builds: ONNX op types or "
                                                               "node-name globs such as */ln_1/* (comma separated).")
    min_batch: int = option(1, "Smallest batch of the profile.", minimum=1, maximum=4096)
    opt_batch: int | None = option(None, "Batch TensorRT tunes for (default: the max).", minimum=1, maximum=4096)
    batch_buckets: tuple[int, ...] = option((), "Batch sizes, repeatable or as a comma list (1,4,8), the engine is built "
                                                "for: one profile per bucket, ending at --max-batch.", minimum=1, maximum=4096, flag="--batch")
    workspace_mb: int = option(1024, "Builder workspace limit in MiB.", minimum=1, maximum=1 << 20)
    optimization_level: int | None = option(None, "Builder optimisation level.", minimum=0, maximum=5)
    timing_cache: str | None = option(None, "Folder for timing caches (keyed by GPU architecture and TensorRT "
                                            "version).")
    dla_core: int | None = option(None, "Run on this DLA core with GPU fallback.", minimum=0, maximum=15)
    version_compatible: bool = option(False, "Build a version-compatible engine.")
    hardware_compatibility: str | None = option(None, "Hardware compatibility level.", choices=HARDWARE_LEVELS)
    tf32: bool = option(False, "Let fp32 layers use TF32 (faster, ~1e-3 relative error).")
    rtx_targets: tuple[str, ...] = option((), "TensorRT-RTX compute targets (comma separated; default: its portable "
                                              "set).", choices=RTX_TARGETS, fold_case=True)
    calibration_images: str | None = option(None, "Images that calibrate int8.")
    calibration_cache: str | None = option(None, "int8 calibration cache (default: beside the engine).")
    bundle: str | None = option(None, "Also write the engine's Jetson package to this folder (what `vitexport "
                                      "package ENGINE --target jetson` writes: the ONNX, a build script, golden data, "
                                      "a check).")
    opset: int = option(17, "ONNX opset of the ONNX the engine builds from.", minimum=1)
    exporter: str = option("auto", "ONNX exporter of the ONNX the engine builds from.", choices=EXPORTERS)

    @property
    def dynamic(self) -> bool:
        return self.dynamic_batch or self.profile_max > self.min_batch or len(self.batch_buckets) > 1

    @property
    def profile_max(self) -> int:
        """The largest batch the engine takes: --max-batch, else 8 with --dynamic-batch, else --min-batch."""
        if self.max_batch is not None:
            return self.max_batch
        return max(self.check_max_batch, self.min_batch) if self.dynamic_batch else self.min_batch

    @property
    def profile_opt(self) -> int:
        return self.opt_batch or self.profile_max

    def profiles(self) -> list[tuple[int, int, int]]:
        """(min, opt, max) batch per profile: one, or one per bucket (min..b1, b1+1..b2, ...)."""
        if not self.batch_buckets:
            return [(self.min_batch, self.profile_opt, self.profile_max)]
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

    def check(self) -> None:
        _rules(self, calibrated=False)


def validate(options: TensorRTOptions, trt: "Trt | None" = None, *, has_dla: bool | None = None,
             calibrated: bool = False) -> None:
    """Raise UsageError (exit 2) for options no build could honour.

    Without `trt` only the rules that hold for every TensorRT are checked; with it, also what that
    generation lacks (DLA, compatibility flags, optimisation levels, RTX targets). `calibrated`: int8
    ranges are already settled (calibration arrays given, or an ONNX with QuantizeLinear/DequantizeLinear
    pairs), so no --calibration-images are needed.
    """
    check_fields(options)
    _rules(options, calibrated)
    if trt is not None:
        _validate_for(options, trt)
    elif has_dla is False and options.dla_core is not None:
        raise UsageError("this TensorRT has no DLA support (DLA exists on Jetson Xavier/Orin)")


def _rules(options: TensorRTOptions, calibrated: bool) -> None:
    """What no TensorRT could build, whichever generation."""
    if not 1 <= options.min_batch <= options.profile_opt <= options.profile_max:
        raise UsageError(f"profile needs 1 <= min <= opt <= max, got min {options.min_batch}, "
                         f"opt {options.profile_opt}, max {options.profile_max}")
    buckets = list(options.batch_buckets)
    if buckets and (buckets != sorted(set(buckets)) or buckets[0] < options.min_batch
                    or buckets[-1] != options.profile_max):
        raise UsageError(f"batch buckets must rise strictly from the min batch {options.min_batch} and end at the "
                         f"max batch {options.profile_max}, got {buckets}")
    if "CURRENT" in (t.upper() for t in options.rtx_targets) and len(options.rtx_targets) > 1:
        raise UsageError("--rtx-targets CURRENT (the GPU here) cannot be combined with other targets")
    if options.dla_core is not None:
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
