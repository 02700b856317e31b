"""What a deploy package holds and sends back: its manifest (`vitexport.package/1`), its golden data
(`vitexport.golden/1`) and the report its check writes on the device (`vitexport.device-report/1`,
judged by `vitexport verify --device-report`). A device report is data from elsewhere: every field is
checked before anything is compared."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from vitexport.core.schemas.bench import Conditions, KernelRates, PerRound, ReferenceKernel
from vitexport.core.schemas.fields import (MAX_MS, Amount, Count, Cosine, ErrorOrNonFinite, Number, Ratio, Record,
                                           Seconds, Sha256, Share, Size, Spread, Tolerance, within, within_check)

TARGETS = Literal["linux", "jetson", "macos", "ios", "android", "web"]
MAX_DIMS = 8
NON_FINITE = Literal["NaN", "Infinity", "-Infinity"]
# An output value as the device computed it: NaN and infinities are data to judge (an fp16 overflow
# on a phone computes them), written as strings by vitexport's check or as JSON's NaN tokens by others.
DeviceValue = Annotated[float, Field(allow_inf_nan=True)]


def inside(name: str) -> str:
    """A relative path inside the package ('/'-separated, no '..', no absolute path)."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{name!r} is not a path inside the package")
    return name


class FileEntry(Record):
    sha256: Sha256
    size: Count


class PackagedArtifact(Record):
    backend: str
    file: str
    model: Optional[str] = None
    precision: Optional[str] = None
    sha256: Optional[Sha256] = None
    sidecar: Optional[str] = None
    status: Optional[str] = None

    @field_validator("file")
    @classmethod
    def _file(cls, name: str) -> str:
        return inside(name)


class Manifest(Record):
    """manifest.json: sha256 and size of every other file, the target, the artifact and its runner."""

    schema_: Literal["vitexport.package/1"] = Field(alias="schema")
    target: TARGETS
    artifact: PackagedArtifact
    runner: dict[str, Any]
    check: Optional[dict[str, Any]] = None
    versions: Optional[dict[str, Any]] = None
    files: dict[str, FileEntry]

    @field_validator("files")
    @classmethod
    def _inside(cls, files: dict[str, FileEntry]) -> dict[str, FileEntry]:
        for name in files:
            inside(name)
        return files


class GoldenCase(Record):
    name: str
    batch: Size
    input: str
    outputs: list[str]
    rows: Optional[Count] = None
    source: Optional[str] = None
    images: Optional[list[str]] = None
    labels: Optional[list[Optional[int]]] = None

    @field_validator("input")
    @classmethod
    def _input(cls, name: str) -> str:
        return inside(name)

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, names: list[str]) -> list[str]:
        return [inside(n) for n in names]


class GoldenTolerance(Record):
    atol: Tolerance
    rtol: Tolerance
    min_cosine: Cosine


class Golden(Record):
    """golden/golden.json: the inputs the check feeds and PyTorch's outputs for them, with the tolerance."""

    schema_: Literal["vitexport.golden/1"] = Field(alias="schema")
    precision: str
    input_name: str
    output_names: list[str] = Field(min_length=1)
    tolerance: GoldenTolerance
    cases: list[GoldenCase]
    # What the model does: the device's outputs are judged in its terms too (packages before tasks: classification)
    task: Literal["classification", "embedding", "depth", "segmentation", "detection", "matting"] = "classification"
    task_gates: Optional[dict[str, Number]] = None  # the limits given at packaging (--task-gate), if any
    class_scores: Literal["softmax", "sigmoid"] = "softmax"  # how a detector's class logits read (taskmeasures)


class Output(Record):
    """One output as the device computed it: its shape and its values, non-finite ones as strings."""

    shape: list[Count] = Field(max_length=MAX_DIMS)
    data: list[DeviceValue | NON_FINITE]

    @model_validator(mode="after")
    def _sized(self):
        import math

        if len(self.data) != math.prod(self.shape):
            raise ValueError(f"data holds {len(self.data)} values; shape {self.shape} needs {math.prod(self.shape)}")
        return self


class CaseCheck(Record):
    output: Optional[str] = None
    passed: Optional[bool] = None
    reason: Optional[str] = None
    max_abs_error: Optional[ErrorOrNonFinite] = None
    cosine_similarity: Optional[float] = None
    top1_agreement: Optional[Share] = None


class Case(Record):
    name: str
    outputs: dict[str, Output]
    checks: Optional[list[CaseCheck]] = None


class CaseTiming(Record):
    """A case's timings, as bench times a row: every `*_ms` key is a time the device took; the
    percentiles are over every timed run, `per_round` holds each round's median and the reference
    kernel beside it (bench's row shape, so bench's regression gate reads it), `spread` the relative
    spread of the round medians (1.4826 x MAD / median; null below two rounds)."""

    batch: Optional[Size] = None
    runs: Optional[Count] = None
    warmup: Optional[Count] = None
    warmup_s: Optional[Seconds] = None
    rounds: Optional[Count] = None
    p50_ms: Optional[Spread] = None
    p90_ms: Optional[Spread] = None
    p99_ms: Optional[Spread] = None
    mean_ms: Optional[Spread] = None
    min_ms: Optional[Spread] = None
    max_ms: Optional[Spread] = None
    per_round: Optional[PerRound] = None
    spread: Optional[Ratio] = None

    @model_validator(mode="after")
    def _rounds(self):
        if self.per_round is not None:
            medians, references = self.per_round.median_ms, self.per_round.reference_ms
            if references and len(references) != len(medians):
                raise ValueError(f"per_round holds {len(medians)} medians but {len(references)} reference times")
            if self.rounds is not None and len(medians) != self.rounds:
                raise ValueError(f"per_round holds {len(medians)} medians for {self.rounds} rounds")
        return self

    @model_validator(mode="after")
    def _times(self):
        for key, value in (self.model_extra or {}).items():  # times a newer check may add
            if key.endswith("_ms"):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise ValueError(f"{key} is {value!r}, not a time the device took")
                try:
                    within_check(value, 0, MAX_MS)
                except Exception:
                    raise ValueError(f"{key} is {value!r}, not a time the device took") from None
        return self


class Timings(Record):
    budget_s: Optional[Seconds] = None  # seconds of timed runs per case (null: a fixed number of runs)
    load_ms: Optional[Spread] = None
    cold_load: Optional[bool] = None  # the package's files dropped from the page cache before the load
    first_inference_ms: Optional[Spread] = None  # the first run after the load, alone
    load_anon_mb: Optional[Amount] = None  # what the load added to the process: its own memory...
    load_file_mb: Optional[Amount] = None  # ... and files mapped (the runtime's start included)
    cases: dict[str, CaseTiming] = {}


class ReportedPackage(Record):
    manifest_sha256: Sha256
    name: Optional[str] = None
    artifact: Optional[str] = None
    backend: Optional[str] = None
    target: Optional[str] = None
    files_verified: Optional[Count] = None
    batches: Optional[list[Size]] = None  # the batch sizes the package was built for


class WebGpuAdapter(Record):
    """The WebGPU adapter a browser gave the page (GPUAdapterInfo); `software`: SwiftShader, llvmpipe or
    a fallback adapter, whose speed is a CPU's."""

    vendor: Optional[str] = None
    architecture: Optional[str] = None
    device: Optional[str] = None
    description: Optional[str] = None
    fallback: Optional[bool] = None
    software: Optional[bool] = None


class CpuNodes(Record):
    """The nodes ONNX Runtime Web placed on the CPU (WebAssembly) beside WebGPU: how many of all, by
    operator type (shape computations are put there on purpose; the others the provider lacks)."""

    nodes: Count
    of: Count
    ops: dict[str, Count] = {}


class DeviceFacts(Record):
    """What the device says about itself; printed, never acted on."""

    model: Optional[str] = None
    cpu: Optional[str] = None
    os: Optional[str] = None
    machine: Optional[str] = None
    runtime: Optional[str] = None
    provider: Optional[str] = None
    compute_units: Optional[str] = None
    stand_in: Optional[bool] = None
    browser: Optional[str] = None  # web: the browser the page ran in, as its --version says
    webgpu_adapter: Optional[WebGpuAdapter] = None
    webgpu_cpu_nodes: Optional[CpuNodes] = None


Celsius = within(-273.15, 1000.0)


class JetsonClocks(Record):
    cpu_mhz: Optional[Amount] = None
    gpu_mhz: Optional[Amount] = None
    emc_mhz: Optional[Amount] = None


class JetsonReadings(Record):
    """nvpmodel's power mode, the clocks from sysfs and every thermal zone (null: not readable)."""

    power_mode: Optional[str] = None
    clocks: Optional[JetsonClocks] = None
    thermal_c: Optional[dict[str, Celsius]] = None


class IosReadings(Record):
    """ProcessInfo.thermalState and isLowPowerModeEnabled when the check ran."""

    thermal_state: Optional[Literal["nominal", "fair", "serious", "critical"]] = None
    low_power_mode: Optional[bool] = None


class AndroidReadings(Record):
    """PowerManager.currentThermalStatus (as PowerManager names it) and the battery's sticky intent."""

    thermal_status: Optional[Literal["none", "light", "moderate", "severe", "critical", "emergency",
                                     "shutdown"]] = None
    charging: Optional[bool] = None
    battery_temp_c: Optional[Celsius] = None


class DeviceReferenceKernel(ReferenceKernel):
    gflops: Optional[KernelRates] = None


class DeviceConditions(Conditions):
    """What the device did while the check timed: bench's conditions (the rounds, steal, the clock, the
    reference kernel) where the platform can say them, and the platform's own readings."""

    platform: Optional[TARGETS] = None
    reference_kernel: Optional[DeviceReferenceKernel] = None
    jetson: Optional[JetsonReadings] = None
    ios: Optional[IosReadings] = None
    android: Optional[AndroidReadings] = None


class DeviceReport(Record):
    """device-report.json, written by a package's check on the device."""

    schema_: Literal["vitexport.device-report/1"] = Field(alias="schema")
    package: ReportedPackage
    device: DeviceFacts
    cases: list[Case]
    deterministic: Optional[bool] = None
    timings: Optional[Timings] = None
    created: Optional[str] = None
    verdict: Optional[dict[str, Any]] = None
    conditions: Optional[DeviceConditions] = None

    @field_validator("cases")
    @classmethod
    def _once(cls, cases: list[Case]) -> list[Case]:
        names = [c.name for c in cases]
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:
            raise ValueError(f"case {twice!r} is reported twice")
        return cases
