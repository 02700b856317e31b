"""Sidecars (`vitexport.sidecar/2`, and `/1` read too) and the `verify`/export `--json` result a
parity `--baseline` names. `options` and `info` belong to the backend that wrote them: their keys
are the backend's to check (its Options class, its own readers), their being objects is checked here."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import ConfigDict, Field, field_validator

from vitexport.core.schemas.fields import (Cosine, CosineOrNaN, Count, ErrorOrNonFinite, Number, Record, Sha256,
                                           Share, Size, Tolerance)

SCHEMA = "vitexport.sidecar/2"
STATUSES = Literal["verified", "FAILED", "not-checked-here", "unverified"]


class ConfigOverrides(Record):
    """`--set` overrides of a preset's config, typed as `--set` types them (the config checks ranges)."""

    model_config = ConfigDict(extra="forbid")

    image_size: Optional[Size | Annotated[list[Size], Field(min_length=2, max_length=2)]] = None  # 224, or [h, w]
    patch_size: Optional[Size] = None
    in_chans: Optional[Size] = None
    num_classes: Optional[Count] = None
    embed_dim: Optional[Size] = None
    depth: Optional[Size] = None
    num_heads: Optional[Size] = None
    mlp_ratio: Optional[Number] = None
    norm_eps: Optional[Number] = None
    qkv_bias: Optional[bool] = None
    activation: Optional[str] = None
    pooling: Optional[str] = None
    pos_embed: Optional[str] = None
    attention: Optional[str] = None
    mean: Optional[list[Number]] = None
    std: Optional[list[Number]] = None


class Spec(Record):
    """The model spec the artifact was made from: what `verify` rebuilds."""

    model: str
    overrides: ConfigOverrides = ConfigOverrides()
    weights: Optional[str] = None
    allow_pickle: bool = False
    input_shape: Optional[list[Size]] = None
    seed: Count = 0
    task: Optional[Literal["classification", "embedding", "depth", "segmentation", "detection", "matting"]] = None


class Reference(Record):
    """A model held in memory at export: its reference program, a file beside the artifact."""

    file: str = Field(pattern=r"^[^/\\]+\.reference\.pt2$")  # a file name, never a path elsewhere
    sha256: Sha256
    class_name: str = Field(alias="class")
    params_sha256: Sha256
    feeds: list[str] = []


class Source(Record):
    spec: Spec
    kind: str
    config: Optional[dict[str, Any]] = None
    weights_sha256: Optional[Sha256] = None
    input_shape: list[Size]
    preprocessing: dict[str, Any]
    notes: list[str] = []
    reference: Optional[Reference] = None
    task: Literal["classification", "embedding", "depth", "segmentation", "detection", "matting"] = "classification"
    class_scores: Literal["softmax", "sigmoid"] = "softmax"  # how a detector's class logits read (taskmeasures)


class Check(Record):
    """One feed x output of a parity check."""

    passed: Optional[bool] = None
    reason: Optional[str] = None
    batch: Optional[Size] = None
    max_abs_error: Optional[ErrorOrNonFinite] = None
    mean_abs_error: Optional[ErrorOrNonFinite] = None
    cosine_similarity: Optional[CosineOrNaN] = None
    top1_agreement: Optional[Share] = None
    top5_agreement: Optional[Share] = None


class ImageCheck(Record):
    directory: str
    count: Count
    top1_agreement: Share
    accuracy: Optional[dict[str, Share]] = None
    decisive: Optional[Count] = None
    decisive_top1_agreement: Optional[Share] = None


class Parity(Record):
    """A parity report: worst case over every check, the tolerance, the checks themselves."""

    passed: Optional[bool]
    precision: str
    skipped: Optional[str] = None
    atol: Tolerance
    rtol: Tolerance
    min_cosine: Cosine
    min_top1_agreement: Optional[Share] = None
    max_accuracy_drop: Optional[Number] = None
    max_abs_error: Optional[ErrorOrNonFinite] = None
    mean_abs_error: Optional[ErrorOrNonFinite] = None
    p99_relative_error: Optional[ErrorOrNonFinite] = None
    softmax_kl: Optional[ErrorOrNonFinite] = None
    cosine_similarity: Optional[CosineOrNaN] = None
    top1_agreement: Optional[Share] = None
    top5_agreement: Optional[Share] = None
    batches: list[Size] = []
    checks: list[Check] = []
    failures: list[str] = []
    deterministic: Optional[bool] = None
    images: Optional[ImageCheck] = None
    lint: Optional[list[dict[str, Any]]] = None
    divergence: Optional[dict[str, Any]] = None
    task: Optional[str] = None  # what the model does; its numbers by name in task_metrics
    task_metrics: Optional[dict[str, Optional[Number]]] = None
    task_judged_on: Optional[list[str]] = None  # the numbers whose gates judged it
    task_not_given: Optional[dict[str, str]] = None  # why a number is n/d
    task_gates: Optional[dict[str, Number]] = None  # the user's limits on them (--task-gate)


def _file_name(name: str) -> str:
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"{name!r} is not a file name beside the artifact")
    return name


class Sidecar(Record):
    """The record next to every artifact (`NAME.EXT.json`)."""

    schema_: Literal["vitexport.sidecar/2"] = Field(alias="schema")
    backend: str
    artifact: str
    source: Source
    seed: Count
    precision: str
    input_names: list[str] = Field(min_length=1)
    output_names: list[str] = Field(min_length=1)
    input_shape: list[Size | Literal["batch"]]
    dynamic_batch: bool
    options: dict[str, Any]
    info: dict[str, Any]
    tools: dict[str, Optional[str]] = {}
    created: Optional[str] = None
    parity: Optional[Parity] = None
    provider: Optional[str] = None
    status: STATUSES = "unverified"
    artifact_sha256: Optional[Sha256] = None
    files: list[str] = []
    upstream: Optional[dict[str, Any]] = None
    published: list[str] = []

    @field_validator("artifact")
    @classmethod
    def _artifact(cls, name: str) -> str:
        return _file_name(name)

    @field_validator("files", "published")
    @classmethod
    def _beside(cls, names: list[str]) -> list[str]:
        return [_file_name(n) for n in names]


class SidecarV1(Sidecar):
    """Schema 1 (read, upgraded on read): `export_options` where schema 2 has `options`, no `status`."""

    schema_: Literal["vitexport.sidecar/1"] = Field(alias="schema")
    options: dict[str, Any] = {}
    export_options: Optional[dict[str, Any]] = None


class VerifyResult(Record):
    """What `verify --json` and an export's `--json` print; `verify --baseline` reads one back."""

    backend: str
    artifact: Optional[str] = None
    precision: Optional[str] = None
    status: Optional[str] = None
    parity: Parity
