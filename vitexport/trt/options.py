"""TensorRT build options and the rules that hold before anything is built."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import UsageError

PRECISIONS = ("fp32", "fp16", "int8")
# LayerNorm after attention overflows in fp16 (its Pow/ReduceMean), and Softmax loses its tail:
# keep them in fp32 unless the user says otherwise.
DEFAULT_FP32_LAYERS = ("LayerNormalization", "Softmax")


@dataclass
class TensorRTOptions:
    builder: str = "auto"  # auto | tensorrt | rtx
    precision: str = "fp32"
    fp32_layers: tuple[str, ...] = DEFAULT_FP32_LAYERS  # ONNX op types kept in fp32 for fp16 builds
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
    calibration_images: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def dynamic(self) -> bool:
        return self.max_batch > self.min_batch or bool(self.batch_buckets)

    def profiles(self) -> list[tuple[int, int, int]]:
        """(min, opt, max) batch per profile: one, or one per bucket (1..b1, b1+1..b2, ...)."""
        if not self.batch_buckets:
            return [(self.min_batch, self.opt_batch, self.max_batch)]
        out, low = [], self.min_batch
        for high in self.batch_buckets:
            out.append((low, high, high))
            low = high + 1
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def validate(options: TensorRTOptions, has_dla: bool | None = None) -> None:
    """Raise UsageError (exit 2) for options no TensorRT build could honour.

    `has_dla` says whether the TensorRT at hand has DLA support (None: not known yet).
    """
    if options.builder not in ("auto", "tensorrt", "rtx"):
        raise UsageError(f"--builder must be auto, tensorrt or rtx, got {options.builder!r}")
    if options.precision not in PRECISIONS:
        raise UsageError(f"TensorRT precision must be one of {', '.join(PRECISIONS)}, got {options.precision!r}")
    if not 1 <= options.min_batch <= options.opt_batch <= options.max_batch:
        raise UsageError(f"profile needs 1 <= min <= opt <= max, got min {options.min_batch}, "
                         f"opt {options.opt_batch}, max {options.max_batch}")
    buckets = list(options.batch_buckets)
    if buckets and (buckets != sorted(set(buckets)) or buckets[0] < options.min_batch
                    or buckets[-1] != options.max_batch):
        raise UsageError(f"batch buckets must rise strictly and end at the max batch {options.max_batch}, got {buckets}")
    if options.workspace_mb <= 0:
        raise UsageError("--workspace-mb must be positive")
    if options.optimization_level is not None and not 0 <= options.optimization_level <= 5:
        raise UsageError("--optimization-level must be 0..5")
    if options.hardware_compatibility not in (None, "ampere_plus", "same_compute_capability"):
        raise UsageError("--hardware-compatibility must be ampere_plus or same_compute_capability")
    if options.dla_core is not None:
        if options.dla_core < 0:
            raise UsageError("--dla-core must be >= 0")
        if options.dynamic:
            raise UsageError("DLA needs static shapes: drop the dynamic batch (min = max) to use --dla-core")
        if options.precision == "fp32":
            raise UsageError("DLA runs fp16 or int8 only: choose --precision fp16 or int8 with --dla-core")
        if has_dla is False:
            raise UsageError("this TensorRT has no DLA support (DLA exists on Jetson Xavier/Orin)")
    if options.precision == "int8" and not options.calibration_images:
        # Calibrating on noise gives meaningless ranges: int8 needs real images, whether they feed a
        # calibrator (TensorRT 8.6/10) or quantise a QDQ ONNX (TensorRT 11 / RTX, strongly typed).
        raise UsageError("int8 needs calibration images: give --calibration-images DIR")
