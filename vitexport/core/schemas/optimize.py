"""optimize's cache records (`vitexport.optimize-cache/1`): one per built candidate, per check of it,
per timing of a set of candidates. Written by vitexport.optimize.cache, read back before any reuse."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from vitexport.core.schemas.artifact import Parity
from vitexport.core.schemas.bench import Row
from vitexport.core.schemas.fields import Record, Seconds, Sha256

SCHEMA = "vitexport.optimize-cache/1"


class BuildRecord(Record):
    """candidates/builds/KEY/entry.json: a candidate built (not checked) and the files it is."""

    schema_: Literal["vitexport.optimize-cache/1"] = Field(alias="schema")
    kind: Literal["build"]
    key: str
    label: str
    backend: str
    artifact: str
    artifact_sha256: Sha256
    seconds: Optional[Seconds] = None


class CheckRecord(Record):
    """candidates/builds/KEY/check-CHECKKEY.json: what checking that candidate found."""

    schema_: Literal["vitexport.optimize-cache/1"] = Field(alias="schema")
    kind: Literal["check"]
    key: str
    artifact_sha256: Sha256
    status: Literal["passed", "failed", "unchecked"]
    reason: Optional[str] = None
    parity: Optional[Parity] = None
    provider: Optional[str] = None
    refined_options: Optional[dict[str, Any]] = None  # failed, and rebuilt with more of it in float
    seconds: Optional[Seconds] = None


class TimingRecord(Record):
    """candidates/timing-KEY.json: the bench rows of one timing of a set of candidates."""

    schema_: Literal["vitexport.optimize-cache/1"] = Field(alias="schema")
    kind: Literal["timing"]
    key: str
    results: list[Row]
    files: Optional[dict[str, Any]] = None
    seconds: Optional[Seconds] = None
