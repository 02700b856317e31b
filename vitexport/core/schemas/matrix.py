"""The matrix's own files: its plan (TOML, written by hand) and its cache records (`vitexport.matrix/1`,
one per finished export or timing). A plan is checked key by key by `vitexport.matrix.plan`, which
knows each backend's options; the model here describes its shape for editors and is kept true to that
reader by the tests. Unlike the files vitexport writes, a plan refuses unknown keys: they are typos."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field

from vitexport.core.schemas.artifact import Parity
from vitexport.core.schemas.bench import Fingerprint, Roofline, Row, Settings
from vitexport.core.schemas.fields import Count, Record, Seconds, Sha256, Size, Tolerance, within

SCHEMA = "vitexport.matrix/1"


class ExportRecord(Record):
    """cache/export-KEY.json: what one export produced."""

    schema_: Literal["vitexport.matrix/1"] = Field(alias="schema")
    kind: Literal["export"]
    key: str
    status: Literal["passed", "failed", "unchecked"]
    reason: Optional[str] = None
    artifact: Optional[str] = None
    artifact_sha256: Optional[Sha256] = None
    provider: Optional[str] = None
    precision: Optional[str] = None
    input_shape: Optional[list[Size | Literal["batch"]]] = None
    options: Optional[dict[str, Any]] = None
    info: Optional[dict[str, Any]] = None
    parity: Optional[Parity] = None
    seconds: Optional[Seconds] = None
    node: Optional[str] = None


class Machine(Record):
    fingerprint: Optional[Fingerprint] = None
    settings: Optional[Settings] = None
    roofline: Optional[Roofline] = None
    roofline_int8: Optional[Roofline] = None
    roofline_cuda: Optional[Roofline] = None


class TimingRecord(Record):
    """cache/timing-KEY.json: the bench rows one timing measured, and the machine."""

    schema_: Literal["vitexport.matrix/1"] = Field(alias="schema")
    kind: Literal["timing"]
    key: str
    status: str
    reason: Optional[str] = None
    rows: list[Row]
    machine: Optional[Machine] = None
    seconds: Optional[Seconds] = None
    node: Optional[str] = None


class Closed(Record):
    """A table of a plan: written by hand, so an unknown key is a typo, refused."""

    model_config = ConfigDict(extra="forbid")



class PlanCheck(Closed):
    images: Optional[str] = None
    atol: Optional[Tolerance] = None
    rtol: Optional[Tolerance] = None
    min_top1_agreement: Optional[within(0, 1)] = None
    max_accuracy_drop: Optional[within(0, 100)] = None


class PlanBench(Closed):
    batches: list[within(1, 4096, int)] = [1]
    threads: Optional[within(1, 4096, int)] = None
    warmup_iters: within(0, 1_000_000, int) = 5
    warmup_s: within(0, 1e6) = 1.0
    iters: Optional[within(1, 10_000_000, int)] = None
    budget_s: within(0, 1e6) = 5.0
    rounds: Optional[within(1, 1000, int)] = None
    roofline: bool = True
    devices: list[str] = ["local"]


class PlanModel(Closed):
    """A model: a preset (`config`) or a model spec (`model`), with what the CLI's flags would set."""

    name: Optional[str] = None
    config: Optional[str] = None
    model: Optional[str] = None
    set: dict[str, Any] = {}
    weights: Optional[str] = None
    allow_pickle: bool = False
    input_shape: Optional[list[within(1, 2**31 - 1, int)]] = None


class PlanTarget(Closed):
    """A backend with one precision (or several) and its options (the export command's flags)."""

    backend: str
    precision: Optional[str] = None
    precisions: Optional[list[str]] = None
    options: dict[str, Any] = {}
    bench: Optional[list[str]] = None
    devices: Optional[list[str]] = None
    name: Optional[str] = None


class Plan(Closed):
    """A matrix plan (TOML): models x targets, the check's tolerances and the bench settings."""

    name: Optional[str] = None
    seed: within(0, 2**32 - 1, int) = 0
    check: PlanCheck = PlanCheck()
    bench: PlanBench = PlanBench()
    models: list[PlanModel] = Field(min_length=1)
    targets: list[PlanTarget] = Field(min_length=1)
