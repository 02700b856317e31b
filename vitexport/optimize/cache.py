"""optimize's cache, in the output folder, so a second run on the same model builds, checks and times
nothing it did before:

    OUT/candidates/builds/KEY/            one built candidate: its artifact, its sidecar, entry.json
    OUT/candidates/builds/KEY/check-K.json   what its check found, for one set of check inputs
    OUT/candidates/timing-K.json          the bench rows of one timing of a set of candidates

A build's KEY hashes what the artifact depends on: the loaded model's content (every parameter and
buffer, the modules' structure and the source of their classes), its spec and seed, the backend and
its options (the calibration images' content for int8), the versions of the libraries that build it
and vitexport's code that builds it. A check's adds the check inputs (the images' content, the accuracy
gate) and the code that checks; a timing's, the candidates' sha256s, the bench settings and the
machine's fingerprint.

An entry is built in a staging folder and renamed into place whole, entry.json written last, so a run
killed at any moment leaves no half entry (the next run removes what dead runs left). Before reuse an
entry is read back against its schema and its files hashed against its sidecar; a damaged entry is
removed and built again, never trusted. At most MAX_ENTRIES builds are kept: the least recently used
beyond it are removed at the end of a run (ViT-B's eight CPU candidates take 1.7 GB).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from vitexport.core.schemas.optimize import SCHEMA

MAX_ENTRIES = 24  # three runs' worth of every candidate of one model, or one run of three models
MAX_RECORD_BYTES = 16 * 2**20


def digest(value: Any) -> str:
    """sha256 of a JSON value, independent of key order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def model_digest(loaded) -> str:
    """sha256 of what the loaded model computes: every parameter and buffer (name, dtype, shape,
    bytes), the module tree, and the source of each module class (its forward), with the spec, input
    shape and preprocessing. Computed once per run (ViT-B: about half a second)."""
    import inspect

    import torch

    h = hashlib.sha256()
    model = loaded.model
    tensors = [*model.named_parameters(), *model.named_buffers()]
    for name, tensor in tensors:
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{list(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    h.update(repr(model).encode())
    for cls in sorted({type(m) for m in model.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):  # defined where no source is kept: its name stands for it
            source = f"{cls.__module__}.{cls.__qualname__}"
        h.update(source.encode())
    h.update(digest({"spec": loaded.spec.to_dict(), "input_shape": list(loaded.input_shape),
                     "preprocessing": loaded.preprocessing, "weights": loaded.weights_sha256}).encode())
    return h.hexdigest()


def options_of(options: dict) -> dict:
    """A backend's options from their JSON form (lists back to tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}


# The rooms of vitexport whose code makes an artifact (a build's key) and judges it (a check's key);
# the others (reports, the CLI, bench, optimize itself) change neither.
BUILD_ROOMS = ("core", "models", "backends", "export")
CHECK_ROOMS = ("verify",)


def code_digest(rooms: tuple[str, ...]) -> str:
    """sha256 of the source files of vitexport's `rooms`: a change to how it exports rebuilds."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for room in rooms:
        for path in sorted((root / room).rglob("*.py")):
            h.update(f"{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes())
    return h.hexdigest()


class Cache:
    """The cache under `root` (OUT/candidates). `reuse` False (--no-cache): nothing is read back, and
    what is built, checked and timed replaces its entry."""

    def __init__(self, root: Path, reuse: bool = True):
        from vitexport.core.writer import folder
        from vitexport.export.staging import clean_stale

        self.root, self.reuse = Path(root), reuse
        self.builds = folder(folder(self.root) / "builds")  # a file or link there: refused, naming it
        clean_stale(self.builds)  # staging folders of runs killed outright
        self.used: set[str] = set()
        self.stats = {"builds_reused": 0, "built": 0, "checks_reused": 0, "checked": 0, "timings_reused": 0}

    def entry(self, key: str) -> Path:
        return self.builds / key[:32]

    # ------------------------------------------------------------------------------------ records

    def _read(self, path: Path, kind: str, key: str, fresh: bool = False) -> dict[str, Any] | None:
        """The record at `path` when it is whole, of this schema and kind, under this key; else None
        (always None without `reuse`, unless `fresh`: written during this run)."""
        from vitexport.core import schemas
        from vitexport.core.errors import UsageError
        from vitexport.core.jsonfile import read_json

        if not (self.reuse or fresh) or not path.is_file():
            return None
        try:
            record = read_json(path, f"optimize cache record ({kind})", max_bytes=MAX_RECORD_BYTES)
            schemas.check(f"optimize-{kind}-record", record, path)
        except UsageError:
            return None
        if record.get("schema") != SCHEMA or record.get("key") != key:
            return None
        return record

    @staticmethod
    def _write(path: Path, kind: str, key: str, record: dict[str, Any]) -> None:
        from vitexport.core.writer import write_atomic

        write_atomic(path, json.dumps({"schema": SCHEMA, "kind": kind, "key": key, **record}, indent=1,
                                      default=str) + "\n")

    # ------------------------------------------------------------------------------------- builds

    def has(self, key: str) -> bool:
        """Whether an entry under `key` may be reused (it is read back and hashed when it is used)."""
        return self.reuse and (self.entry(key) / "entry.json").is_file()

    def built(self, key: str, fresh: bool = False) -> Path | None:
        """The artifact of an intact entry under `key`; None when there is none or it is damaged (then
        removed, to be built again). `fresh`: built by this run's helper process, counted as built."""
        from vitexport.export.integrity import intact

        folder = self.entry(key)
        record = self._read(folder / "entry.json", "build", key, fresh)
        path = folder / record["artifact"] if record and "/" not in record["artifact"] else None
        if path is None or not intact(path, record["artifact_sha256"]):
            if folder.exists() and (self.reuse or fresh):
                shutil.rmtree(folder, ignore_errors=True)
            return None
        self._touch(key)
        self.stats["built" if fresh else "builds_reused"] += 1
        return path

    def build(self, key: str, label: str, make: Callable[[Path], Path]) -> Path:
        """Build into a staging folder (`make(folder)` returns the artifact it wrote there), record it,
        and rename the folder into place whole; return the artifact's path there."""
        from vitexport.core.writer import PREFIX
        from vitexport.export import sidecar

        t0 = time.perf_counter()
        stage = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=self.builds))
        try:
            artifact = Path(make(stage))
            record = sidecar.read(artifact)
            self._write(stage / "entry.json", "build", key, {
                "label": label, "backend": record.backend, "artifact": artifact.name,
                "artifact_sha256": record.artifact_sha256, "seconds": time.perf_counter() - t0})
            final = self.entry(key)
            if final.exists():  # a damaged or replaced entry: out of the way first (a folder is not renamed over)
                shutil.rmtree(final)
            os.replace(stage, final)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        self._touch(key)
        self.stats["built"] += 1
        return final / artifact.name

    def forget(self, key: str) -> None:
        """Remove the entry under `key` (found not to be what its key says), to be built again."""
        shutil.rmtree(self.entry(key), ignore_errors=True)
        self.used.discard(key[:32])

    def _touch(self, key: str) -> None:
        self.used.add(key[:32])
        os.utime(self.entry(key))  # least recently used goes first

    # ------------------------------------------------------------------------------------- checks

    def check(self, key: str, check_key: str, artifact_sha256: str) -> dict[str, Any] | None:
        record = self._read(self.entry(key) / f"check-{check_key[:32]}.json", "check", check_key)
        if record is None or record["artifact_sha256"] != artifact_sha256:
            return None
        self.stats["checks_reused"] += 1
        return record

    def put_check(self, key: str, check_key: str, record: dict[str, Any]) -> None:
        self.stats["checked"] += 1
        if self.entry(key).is_dir():
            self._write(self.entry(key) / f"check-{check_key[:32]}.json", "check", check_key, record)

    # ------------------------------------------------------------------------------------ timings

    def timing(self, key: str) -> dict[str, Any] | None:
        record = self._read(self.root / f"timing-{key[:32]}.json", "timing", key)
        if record is not None:
            self.stats["timings_reused"] += 1
        return record

    def put_timing(self, key: str, record: dict[str, Any]) -> None:
        self._write(self.root / f"timing-{key[:32]}.json", "timing", key, record)

    # ------------------------------------------------------------------------------------- bounds

    def prune(self, keep: int = MAX_ENTRIES) -> list[str]:
        """Remove the least recently used entries beyond `keep`, never one this run used; and the
        timings of sets whose candidates are gone. Returns the names removed."""
        entries = sorted((p for p in self.builds.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        removed = []
        for folder in entries[keep:]:
            if folder.name not in self.used:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder.name)
        timings = sorted(self.root.glob("timing-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for path in timings[keep:]:
            path.unlink(missing_ok=True)
        return removed
