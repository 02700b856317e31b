"""Artifacts that many tests read, exported once per test run and shared by every pytest-xdist worker.

An artifact is keyed by what builds it (backend, model spec, options), hashed: the first worker that
asks exports it under a file lock, the others wait for it and read it. They are read-only: a test that
damages, moves or re-signs files copies them first (as tests/cli/test_faults.py's copy_artifact does).
A test of the export itself keeps calling api.export.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

from filelock import FileLock


def key_of(backend: str, spec, options) -> str:
    """A digest of what builds the artifact: the same request gives the same key in every worker."""
    described = {"backend": backend, "spec": dataclasses.asdict(spec),
                 "options": None if options is None else [type(options).__name__, dataclasses.asdict(options)]}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]


class SharedArtifacts:
    """`built(backend, spec, options)`: the export's result dict, made once per run."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def built(self, backend: str, spec, options=None) -> dict:
        """The export's result dict, its paths in the shared folder: read them, never change them."""
        from vitexport import api

        folder = self.root / key_of(backend, spec, options)
        done = folder / "result.json"
        with FileLock(str(folder) + ".lock"):
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)  # a worker that died mid-export left it
                result = api.export(backend, spec, options, folder / "out")
                done.write_text(json.dumps(result, default=str))
        return json.loads(done.read_text())
