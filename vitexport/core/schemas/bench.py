"""Bench reports (`vitexport.bench/1`): one machine's (`bench`), merged from several (`compare`), and
the matrix's (the same with a `matrix` section). Every number a table, a chart or a regression gate
reads is typed and bounded here; objects only some writers fill (a machine's fingerprint, a run's
conditions) are checked for the fields vitexport reads and passed through for the rest."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from vitexport.core.schemas.fields import (Amount, Cosine, Count, Error, Number, Ratio, Record, Seconds, Share,
                                           Size, Spread, Ms)

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


class Verification(Record):
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
    first_inference_ms: Optional[Spread] = None
    artifact_bytes: Optional[Count] = None
    peak_rss_mb: Optional[Amount] = None
    peak_gpu_mb: Optional[Amount] = None
    roofline_fraction: Optional[Ratio] = None
    roofline_basis: Optional[str] = None
    verification: Optional[Verification] = None
    vs_baseline: Optional[VsBaseline] = None
    threads_applied: Optional[dict[str, Any]] = None
    # Rows of a merged report name their machine and file; rows of a matrix report their cell.
    device_label: Optional[str] = None
    source_report: Optional[str] = None
    target: Optional[str] = None
    cell: Optional[str] = None
    node: Optional[str] = None
    cached: Optional[bool] = None
    named: Optional[bool] = None

    @model_validator(mode="after")
    def _measured(self):
        """A row that ran has every statistic vitexport writes: the tables, charts and gates read them."""
        if self.available:
            missing = [s for s in LATENCY_STATS if getattr(self.latency_ms, s, None) is None]
            if missing:
                raise ValueError(f"ran (available) but has no latency_ms.{missing[0]}")
        return self


class Library(Record):
    gflops: Optional[Amount] = None
    gflops_median: Optional[Amount] = None
    runs: Optional[Count] = None
    bursts: Optional[Count] = None


class Peak(Record):
    gflops: Optional[Amount] = None
    ghz: Optional[Amount] = None
    cores: Optional[Count] = None
    flop_per_cycle: Optional[Amount] = None
    isa: Optional[str] = None
    precision: Optional[str] = None
    clock_source: Optional[str] = None


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


class Conditions(Record):
    """What the machine did during the run: clock, steal, the reference kernel's times per round."""

    rounds: Optional[Count] = None
    disturbed_rounds: Optional[Count] = None
    phase_changes: Optional[Count] = None
    threads: Optional[Count] = None
    seconds: Optional[Seconds] = None
    clock_ghz: Optional[Range] = None
    steal: Optional[Range] = None
    per_round: Optional[list[dict[str, Any]]] = None
    reference_kernel: Optional[dict[str, Any]] = None


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


class Fingerprint(Record):
    cpu: Optional[str] = None
    machine: Optional[str] = None
    threads: Optional[Count] = None


class Source(Record):
    """One machine's report among those a merged report was made from."""

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


class ParityBrief(Record):
    passed: Optional[bool] = None
    max_abs_error: Optional[Error] = None
    mean_abs_error: Optional[Error] = None
    cosine_similarity: Optional[Cosine] = None
    top1_agreement: Optional[Share] = None
    atol: Optional[Amount] = None
    rtol: Optional[Amount] = None


class CellTiming(Record):
    batch: Optional[Size] = None
    status: Optional[str] = None
    reason: Optional[str] = None
    cached: Optional[bool] = None
    rows: list[dict[str, Any]] = []


class Cell(Record):
    id: str
    model: Optional[str] = None
    target: Optional[str] = None
    backend: Optional[str] = None
    precision: Optional[str] = None
    device: Optional[str] = None
    status: Optional[str] = None
    reason: Optional[str] = None
    parity: Optional[ParityBrief] = None
    timings: list[CellTiming] = []


class MatrixSection(Record):
    """What a matrix report adds: its plan, every cell with its export's status and parity."""

    schema_: Literal["vitexport.matrix-report/1"] = Field(alias="schema")
    name: Optional[str] = None
    plan: Optional[str] = None
    cells: list[Cell] = []
    fastest: list[dict[str, Any]] = []
    counts: dict[str, Count] = {}
    exit_code: Optional[Count] = None


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
    baseline: Optional[dict[str, Any]] = None
    sweeps: Optional[list[dict[str, Any]]] = None
    matrix: Optional[MatrixSection] = None
    files: Optional[dict[str, str]] = None
