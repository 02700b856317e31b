"""The matrix folder's cell records: one small JSON file per finished export or timing, named by its
key and written atomically (temporary file, then rename), so a run killed at any moment leaves only
whole records and the next run picks up where it stopped.

    OUT/cache/export-<key>.json   what an export produced: status, parity, artifact (relative to OUT)
    OUT/cache/timing-<key>.json   what a timing measured: the bench rows and the machine
    OUT/artifacts/<key[:16]>/     the exported artifact and its sidecar (failed ones under failed/)

An export record is only trusted while its artifact's files still hash to what its sidecar says and
the sidecar is the one recorded; otherwise the export is redone. Errors and "unavailable here" are
never recorded: they may not happen next time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitexport.matrix.keys import SCHEMA

MAX_RECORD_BYTES = 16 * 2**20


class Cache:
    def __init__(self, out: Path):
        self.out = Path(out)
        self.dir = self.out / "cache"

    def artifacts_for(self, key: str) -> Path:
        """The folder an export of this key publishes into."""
        return self.out / "artifacts" / key[:16]

    def _path(self, kind: str, key: str) -> Path:
        return self.dir / f"{kind}-{key}.json"

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        """The record of `kind` ("export", "timing") under `key`, or None (missing or unreadable)."""
        from vitexport.core import schemas
        from vitexport.core.errors import UsageError
        from vitexport.core.jsonfile import read_json

        path = self._path(kind, key)
        if not path.is_file():
            return None
        try:
            record = read_json(path, "matrix cache record", max_bytes=MAX_RECORD_BYTES)
        except UsageError:
            return None  # damaged: redone and overwritten
        if not isinstance(record, dict) or record.get("schema") != SCHEMA or record.get("key") != key:
            return None
        try:  # a field of the wrong type, NaN, infinite or absurd: damaged like an unreadable record, so redone
            schemas.check(f"matrix-{kind}-record", record, path)
        except UsageError:
            return None
        if kind == "export" and not self.artifact_intact(record):
            return None
        return record

    def put(self, kind: str, key: str, record: dict[str, Any]) -> Path:
        from vitexport.core.writer import write_atomic

        path = self._path(kind, key)
        write_atomic(path, json.dumps({"schema": SCHEMA, "kind": kind, "key": key, **record}, indent=1,
                                      default=str) + "\n")
        return path

    def count(self, kind: str) -> int:
        return len(list(self.dir.glob(f"{kind}-*.json"))) if self.dir.is_dir() else 0

    def artifact_intact(self, record: dict[str, Any]) -> bool:
        """Whether the record's artifact is still the one exported: its files hash to its sidecar's
        sha256, and that sidecar is the one the record was written with."""
        from vitexport.export.integrity import intact

        rel = record.get("artifact")
        if not isinstance(rel, str):
            return record.get("status") not in ("passed", "failed", "unchecked")  # nothing was built
        path = self.out / rel
        return path.resolve().is_relative_to(self.out.resolve()) and intact(path, record.get("artifact_sha256"))

