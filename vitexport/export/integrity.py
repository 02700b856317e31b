"""Whether an artifact is still the one exported: its files present and hashing to the sha256 its
sidecar records. Every command that reads an artifact (verify, bench, package, the caches of the
matrix and optimize) asks here first; a changed artifact is damage (exit 4), never a result."""

from __future__ import annotations

from pathlib import Path

from vitexport import backends
from vitexport.backends.base import Backend
from vitexport.core.errors import UsageError, explained
from vitexport.export import sidecar
from vitexport.export.sidecar import ArtifactRecord


def integrity_problem(be: Backend, path: Path, record: ArtifactRecord) -> str | None:
    """Why the artifact's files are not the ones exported (missing, or another sha256); None if they are."""
    from vitexport.core.environment import NotARegularFile

    missing = [name for name in record.files if not path.with_name(name).exists()]
    if missing:
        return f"{', '.join(missing)} is missing"
    try:
        if record.artifact_sha256 and sidecar.digest(path, be.files(path, record)) != record.artifact_sha256:
            return "its sha256 differs from the sidecar's"
    except NotARegularFile as e:
        return str(e)
    return None


def intact(path: Path, sha256: str | None) -> bool:
    """Whether the artifact at `path` and its sidecar are there, the sidecar names `sha256`, and the
    files hash to it: a cached artifact is still the one exported (the matrix's and optimize's caches)."""
    if not path.exists():
        return False
    try:
        record = sidecar.read(path)
        be = backends.get(record.backend)
    except UsageError:
        return False
    return record.artifact_sha256 == sha256 and integrity_problem(be, path, record) is None


def not_a_file(path: Path, files: list[Path]) -> bool:
    """Whether the artifact or one of its files is something other than a file (a package folder
    for the artifact): a FIFO or device there would block whatever tried to load it."""
    main_ok = path.is_dir() or path.is_file() or not path.exists()
    return not main_ok or any(f.exists() and not f.is_file() for f in files)


def damaged(path: Path, problem: str, error: Exception | None = None) -> str:
    text = f"{path.name} is corrupt or changed since export ({problem})"
    if error is not None:
        text += f"; loading it failed: {explained(error)}"
    return text
