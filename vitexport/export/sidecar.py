"""The JSON written next to every artifact (`NAME.EXT.json`): its `ArtifactRecord`, which holds
everything needed to verify or benchmark the artifact later, on this machine or another.

Schema 2; sidecars of schema 1 are read too (their `export_options` became `options`). Both are
checked field by field on read (`vitexport.core.schemas.artifact`): a damaged or forged one exits 2.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitexport.core.environment import now, sha256_file
from vitexport.core.writer import write_atomic
from vitexport.core.errors import UsageError
from vitexport.core.jsonfile import read_json
from vitexport.models.records import SourceRecord
from vitexport.verify.parity import ParityReport

SCHEMA = "vitexport.sidecar/2"
READABLE = ("vitexport.sidecar/1", SCHEMA)
# What a record's `status` says: checked and matching, checked and not matching (kept for inspection,
# never under the name users deploy), built but not runnable here, or not checked at all.
STATUSES = ("verified", "FAILED", "not-checked-here", "unverified")
MAX_BYTES = 16 * 2**20  # a sidecar is a few kB; its largest part, the parity report, a few hundred


@dataclass
class ArtifactRecord:
    backend: str
    artifact: str  # the artifact's file name, beside its sidecar
    source: SourceRecord
    seed: int
    precision: str
    input_names: list[str]
    output_names: list[str]
    input_shape: list  # ["batch", C, H, W] when the batch is dynamic
    dynamic_batch: bool
    options: dict[str, Any]  # asdict() of the backend's Options
    info: dict[str, Any]  # backend facts, read back only by the backend that wrote them
    tools: dict[str, str] = field(default_factory=dict)
    created: str = field(default_factory=now)
    parity: ParityReport | None = None
    provider: str | None = None
    status: str = "unverified"
    artifact_sha256: str | None = None
    files: list[str] = field(default_factory=list)  # other files the artifact consists of (external data)
    upstream: dict[str, Any] | None = None  # {"artifact", "sha256"} of the artifact it was built from
    # Every name the export put in its folder (artifact, files, by-products such as a typed ONNX): what a
    # later export of the same name may replace; nothing else there is vitexport's to touch.
    published: list[str] = field(default_factory=list)
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "schema"}
        d["source"] = self.source.to_dict()
        d["parity"] = self.parity.to_dict() if self.parity is not None else None
        return {"schema": SCHEMA, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ArtifactRecord":
        d = dict(d)
        if d.get("schema") == "vitexport.sidecar/1":
            d["options"] = d.pop("export_options", {}) or {}
            d["files"] = [d["info"]["external_data"]] if (d.get("info") or {}).get("external_data") else []
            passed = (d.get("parity") or {}).get("passed")
            d["status"] = {True: "verified", False: "FAILED"}.get(passed, "unverified")
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["source"] = SourceRecord(**d["source"])
        d["parity"] = ParityReport.from_dict(d["parity"]) if d.get("parity") else None
        d["schema"] = SCHEMA
        return cls(**d)

    @property
    def passed(self) -> bool:
        return self.status == "verified"


def path_for(artifact: Path) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + ".json")


def write(path: Path, record: ArtifactRecord) -> None:
    """Write atomically so a crash never leaves a truncated sidecar."""
    write_atomic(path, json.dumps(record.to_dict(), indent=2, default=str) + "\n")


def read(artifact: Path) -> ArtifactRecord:
    artifact = Path(artifact)
    if not artifact.exists():
        raise UsageError(f"artifact not found: {artifact}")
    side = path_for(artifact)
    if not side.exists():
        raise UsageError(f"no sidecar {side.name} next to {artifact.name}: cannot tell what to verify against")
    return read_record_file(side)


def read_record_file(side: Path) -> ArtifactRecord:
    """The record in the sidecar file `side`; UsageError (exit 2) for anything that is not one."""
    from vitexport.core import schemas

    data = read_json(side, "sidecar", max_bytes=MAX_BYTES)
    if not isinstance(data, dict) or data.get("schema") not in READABLE:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise UsageError(f"sidecar {side} has schema {schema!r}, expected {SCHEMA}")
    # Every field checked against its schema (vitexport.core.schemas.artifact) before anything is built.
    schemas.check("sidecar" if data["schema"] == SCHEMA else "sidecar-v1", data,
                  f"sidecar {side} is damaged or incomplete")
    try:
        return ArtifactRecord.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # what the schema cannot see: a parity report
        raise UsageError(f"sidecar {side} is damaged or incomplete ({type(e).__name__}: {e})") from None


def digest(artifact: Path, extra_files: list[Path] = ()) -> str:
    """sha256 over an artifact: a file, or every file of a package directory, plus other files."""
    import hashlib

    artifact = Path(artifact)
    files = sorted(p for p in artifact.rglob("*") if p.is_file()) if artifact.is_dir() else [artifact]
    files += [Path(f) for f in extra_files if Path(f).exists()]
    if len(files) == 1 and not artifact.is_dir():
        return sha256_file(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(artifact) if artifact.is_dir() and f.is_relative_to(artifact) else f.name).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()
