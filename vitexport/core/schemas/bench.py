"""Bench reports (`vitexport.bench/1`): one machine's (`bench`), merged from several (`compare`), and
the matrix's (the same with a `matrix` section). Every number a table, a chart or a regression gate
reads is typed and bounded here; objects only some writers fill (a machine's fingerprint, a run's
conditions) are checked for the fields vitexport reads and passed through for the rest."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from vitexport.core.schemas.fields import (Amount, Cosine, Count, Error, Number, Ratio, Record, Seconds, Share,
                                           Size, Spread, Ms)
from vitexport.core.schemas.bench_baseline import Baseline
from vitexport.core.schemas.profile import Profile

SCHEMA = "vitexport.bench/1"
MATRIX_SCHEMA = "vitexport.matrix-report/1"
LATENCY_STATS = ("p50", "mean", "std", "min", "max", "p90", "p99")
STATUSES = Literal["reference", "verified", "FAILED", "not-checked-here", "unverified"]


class Latency(Record):
    mean: Optional[Ms] = None
    p50: Optional[Ms] = None
    p90: Optional[Ms] = None
    p99: Optional[Ms] = None
    min: Optional[Ms] = None
    max: Optional[Ms] = None
    std: Optional[Spread] = None


class PerRound(Record):
    median_ms: list[Optional[Ms]] = []
    reference_ms: list[Optional[Ms]] = []


class TaskBrief(Record):
    """What a non-classifier was judged on, as its parity report says (`task_brief` in vitexport.verify.tasks)."""

    task: Optional[str] = None
    task_metrics: Optional[dict[str, Optional[Number]]] = None
    task_judged_on: Optional[list[str]] = None
    task_gates: Optional[dict[str, Number]] = None  # the user's limits (--task-gate)


class Verification(TaskBrief):
    status: STATUSES
    cosine_similarity: Optional[Cosine] = None
    max_abs_error: Optional[Error] = None
    accuracy: Optional[Share] = None


class VsBaseline(Record):
    baseline_p50_ms: Optional[Ms] = None
    change: Optional[Number] = None
    low: Optional[Number] = None
    high: Optional[Number] = None
    threshold: Optional[Number] = None
    verdict: Optional[str] = None
    regressed: bool = False


class ThreadsApplied(Record):
    threads: Optional[Count] = None
    env: Optional[dict[str, str]] = None
    late: Optional[list[str]] = None
    ort: Optional[dict[str, Count]] = None
    torch: Optional[Count] = None
    torch_interop: Optional[Count] = None


class DeviceCheck(Record):
    """How a row timed by a package's check on a device was judged here (`vitexport compare`)."""

    verdict: Literal["verified on the device", "failed", "not judged"]
    reason: Optional[str] = None
    case: Optional[str] = None
    runtime: Optional[str] = None
    package: Optional[str] = None
    platform: Optional[str] = None
    conditions: Optional[str] = None


class Row(Record):
    """One backend at one batch size: measured, or unavailable with its reason."""

    backend: str
    batch_size: Size
    available: bool = False
    reason: Optional[str] = None
    model: Optional[str] = None
    precision: Optional[str] = None
    artifact: Optional[str] = None
    provider: Optional[str] = None
    dtype: Optional[str] = None
    latency_ms: Optional[Latency] = None
    throughput_ips: Optional[Amount] = None
    cv: Optional[Ratio] = None
    unstable: Optional[bool] = None
    unstable_cv: Optional[Ratio] = None
    iterations: Optional[Count] = None
    rounds: Optional[Count] = None
    per_round: Optional[PerRound] = None
    round_spread: Optional[Ratio] = None
    load_s: Optional[Seconds] = None
    load_cold_s: Optional[Seconds] = None  # the artifact's pages dropped from the page cache first
    load_warm_s: Optional[Seconds] = None
    cold_dropped: Optional[bool] = None  # whether the page cache could be dropped before the cold load
    compile_s: Optional[Seconds] = None  # of the warm load, what the runtime spent compiling (None: not separated)
    model_anon_mb: Optional[Amount] = None  # what the warm load added: the runtime's own memory
    model_file_mb: Optional[Amount] = None  # ... and weights mapped from the artifact
    first_inference_ms: Optional[Spread] = None
    artifact_bytes: Optional[Count] = None
    peak_rss_mb: Optional[Amount] = None
    peak_gpu_mb: Optional[Amount] = None
    roofline_fraction: Optional[Ratio] = None
    roofline_basis: Optional[str] = None
    verification: Optional[Verification] = None
    vs_baseline: Optional[VsBaseline] = None
    threads_applied: Optional[ThreadsApplied] = None
    roofline_note: Optional[str] = None
    # Rows of a merged report name their machine and file; rows of a matrix report their cell.
    device_label: Optional[str] = None
    source_report: Optional[str] = None
    target: Optional[str] = None
    cell: Optional[str] = None
    node: Optional[str] = None
    cached: Optional[bool] = None
    named: Optional[bool] = None
    profile: Optional[Profile] = None
    device_check: Optional[DeviceCheck] = None

    @model_validator(mode="after")
    def _measured(self):
        """A row that ran has every statistic vitexport writes: the tables, charts and gates read them. A
        device's check keeps fewer (an older one only p50, mean and min): p50 at least."""
        if self.available:
            wanted = ("p50",) if self.device_check is not None else LATENCY_STATS
            missing = [s for s in wanted if getattr(self.latency_ms, s, None) is None]
            if missing:
                raise ValueError(f"ran (available) but has no latency_ms.{missing[0]}")
        return self


class Library(Record):
    gflops: Optional[Amount] = None
    gflops_median: Optional[Amount] = None
    runs: Optional[Count] = None
    bursts: Optional[Count] = None


class Peak(Record):
    """The CPU's theoretical peak: cores x FLOP per cycle x clock (all of them, or no rate at all)."""

    gflops: Optional[Amount] = None
    ghz: Optional[Amount] = None
    cores: Optional[Count] = None
    flop_per_cycle: Optional[Amount] = None
    isa: Optional[str] = None
    precision: Optional[str] = None
    clock_source: Optional[str] = None
    note: Optional[str] = None

    @model_validator(mode="after")
    def _whole(self):
        if self.gflops:
            missing = [k for k in ("ghz", "cores", "flop_per_cycle", "isa", "clock_source") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"a peak rate without its {missing[0]}")
        return self


class Roofline(Record):
    """The best GEMM rate a row's basis reached in the run: what its roofline share is taken against."""

    gflops: Optional[Amount] = None
    gflops_median: Optional[Amount] = None
    model_gflop_per_image: Optional[Amount] = None
    basis: Optional[str] = None
    dtype: Optional[str] = None
    library: Optional[str] = None
    n: Optional[Count] = None
    threads: Optional[Count] = None
    libraries: Optional[dict[str, Library]] = None
    peak: Optional[Peak] = None


class Range(Record):
    min: Optional[Amount] = None
    median: Optional[Amount] = None
    max: Optional[Amount] = None
    mean: Optional[Amount] = None


class Clock(Record):
    min: Amount
    median: Amount
    max: Amount
    source: str


class Steal(Record):
    max: Amount
    mean: Amount


class RoundConditions(Record):
    clock_ghz: Optional[Amount] = None
    reference_ms: Optional[Ms] = None
    reference_each_ms: Optional[list[Ms]] = None
    seconds: Optional[Seconds] = None
    steal: Optional[Amount] = None


class KernelRates(Record):
    best: Amount
    median: Amount
    worst: Amount


class KernelTimes(Record):
    min: Ms
    median: Ms
    max: Ms


class ReferenceKernel(Record):
    what: str
    gflops: KernelRates
    ms: KernelTimes


class Conditions(Record):
    """What the machine did during the run: clock, steal, the reference kernel's times per round."""

    rounds: Optional[Count] = None
    disturbed_rounds: Optional[Count] = None
    phase_changes: Optional[Count] = None
    threads: Optional[Count] = None
    seconds: Optional[Seconds] = None
    clock_ghz: Optional[Clock] = None
    steal: Optional[Steal] = None
    per_round: Optional[list[RoundConditions]] = None
    reference_kernel: Optional[ReferenceKernel] = None


class Burst(Record):
    ms: Optional[Amount] = None
    runs: Optional[Count] = None


class Settings(Record):
    threads: Optional[Size] = None
    rounds: Optional[Count] = None
    seed: Optional[Count] = None
    iters: Optional[Count] = None
    warmup_iters: Optional[Count] = None
    warmup_s: Optional[Seconds] = None
    budget_s: Optional[Seconds] = None
    latency_budget_ms: Optional[Ms] = None
    mode: Optional[str] = None
    allow_fallback: Optional[bool] = None
    batch: Optional[list[Size] | Literal["auto"]] = None
    burst: Optional[Burst] = None
    workers_started: Optional[str] = None


class Fingerprint(Record):
    """The machine a report was measured on (what makes two reports comparable)."""

    cpu: Optional[str] = None
    machine: Optional[str] = None
    os: Optional[str] = None
    python: Optional[str] = None
    timestamp: Optional[str] = None
    threads: Optional[Count] = None
    physical_cores: Optional[Count] = None
    logical_cores: Optional[Count] = None
    usable_cores: Optional[Count] = None
    gpus: Optional[list[str]] = None
    gpu_driver: Optional[str] = None
    gpu_source: Optional[str] = None
    cpu_features: Optional[list[str]] = None
    libraries: Optional[dict[str, str]] = None
    thread_env: Optional[dict[str, str]] = None
    jetson_l4t: Optional[str] = None
    jetson_power_mode: Optional[str] = None
    jetson_clocks: Optional[str] = None


class DeviceSource(Record):
    """A device report among those merged: what the device said of itself, and the judgement."""

    facts: dict[str, Any] = {}
    package: Optional[str] = None
    verdict: Optional[str] = None
    reason: Optional[str] = None
    target: Optional[str] = None
    budget_s: Optional[Seconds] = None
    conditions: Optional[dict[str, Any]] = None  # as the device's check wrote them (its own schema)


class Source(Record):
    """One machine's report among those a merged report was made from (a device's, with `device`)."""

    label: str
    path: str
    fingerprint: Optional[Fingerprint] = None
    settings: Optional[Settings] = None
    conditions: Optional[Conditions] = None
    roofline: Optional[Roofline] = None
    roofline_int8: Optional[Roofline] = None
    roofline_cuda: Optional[Roofline] = None
    roofline_bf16: Optional[Roofline] = None
    roofline_fp16: Optional[Roofline] = None
    roofline_cuda_fp16: Optional[Roofline] = None
    roofline_cuda_bf16: Optional[Roofline] = None
    device: Optional[DeviceSource] = None


class ParityBrief(TaskBrief):
    passed: Optional[bool] = None
    max_abs_error: Optional[Error] = None
    mean_abs_error: Optional[Error] = None
    cosine_similarity: Optional[Cosine] = None
    top1_agreement: Optional[Share] = None
    atol: Optional[Amount] = None
    rtol: Optional[Amount] = None


class CellRow(Record):
    """A timing's row as a matrix cell shows it."""

    batch_size: Size
    available: bool
    reason: Optional[str] = None
    provider: Optional[str] = None
    p50_ms: Optional[Ms] = None
    p90_ms: Optional[Ms] = None
    throughput_ips: Optional[Amount] = None
    cv: Optional[Ratio] = None
    roofline_fraction: Optional[Ratio] = None


class CellTiming(Record):
    batch: Size
    status: Optional[str] = None  # none when the timing never ran (its cell's export failed)
    reason: Optional[str] = None
    cached: Optional[bool] = None
    key: Optional[str] = None
    node: Optional[str] = None
    rows: list[CellRow]


class CellExport(Record):
    status: Optional[str] = None  # as the export's record has it; none without a record
    artifact: Optional[str] = None
    cached: Optional[bool] = None
    seconds: Optional[Seconds] = None
    provider: Optional[str] = None


class Cell(Record):
    """One model x target x bench target x device of the plan."""

    id: str
    model: str
    target: str
    backend: str
    precision: str
    device: str
    status: str
    reason: Optional[str] = None
    bench_target: Optional[str] = None
    parity: Optional[ParityBrief] = None
    export: Optional[CellExport] = None
    timings: list[CellTiming]


class Best(Record):
    target: str
    bench_target: Optional[str] = None
    precision: Optional[str] = None
    artifact: Optional[str] = None
    p50_ms: Ms
    throughput_ips: Optional[Amount] = None
    cosine_similarity: Optional[Cosine] = None


class Fastest(Record):
    model: str
    device: str
    batch: Size
    candidates: Count
    best: Optional[Best] = None


class Stopped(Record):
    """Why a matrix run ended before its cells did: a signal, a lost cluster."""

    by: str
    reason: str
    exit_code: Count


class MatrixSection(Record):
    """What a matrix report adds: its plan, every cell with its export's status and parity."""

    schema_: Literal["vitexport.matrix-report/1"] = Field(alias="schema")
    name: str
    plan: str
    out: Optional[str] = None
    ran_on: Optional[str] = None
    cells: list[Cell]
    fastest: list[Fastest]
    counts: dict[str, Count]
    cached: dict[str, Count]
    devices: dict[str, dict[str, Any]] = {}
    stopped: Optional[Stopped] = None
    exit_code: Count


class Gain(Record):
    ratio: Amount


class Step(Record):
    batch: Size
    throughput_ips: Amount
    gain: Optional[Gain] = None


class Sweep(Record):
    """A `--batch auto` sweep: the batches tried, the knee, why it stopped."""

    backend: str
    precision: str
    artifact: Optional[str] = None
    knee_batch: Optional[Size] = None
    knee_ips: Optional[Amount] = None
    steps: list[Step]
    stopped: str


class BenchReport(Record):
    """A bench report, merged report or matrix report: one row per backend x batch size (x machine)."""

    schema_: Literal["vitexport.bench/1"] = Field(alias="schema")
    model: Optional[str] = None
    label: Optional[str] = None
    input_shape: Optional[list[Size | Literal["batch"]]] = None
    fingerprint: Optional[Fingerprint] = None
    settings: Optional[Settings] = None
    results: list[Row]
    roofline: Optional[Roofline] = None
    roofline_int8: Optional[Roofline] = None
    roofline_cuda: Optional[Roofline] = None
    roofline_bf16: Optional[Roofline] = None
    roofline_fp16: Optional[Roofline] = None
    roofline_cuda_fp16: Optional[Roofline] = None
    roofline_cuda_bf16: Optional[Roofline] = None
    conditions: Optional[Conditions] = None
    warnings: Optional[list[str]] = None
    merged_from: Optional[list[str]] = None
    sources: Optional[list[Source]] = None
    ranking: Optional[dict[str, list[str]]] = None
    baseline: Optional[Baseline] = None
    sweeps: Optional[list[Sweep]] = None
    matrix: Optional[MatrixSection] = None
    files: Optional[dict[str, str]] = None
