"""Where exports are written before they are published: nothing partial is ever visible under a
final name, and a run killed outright (SIGKILL, power loss) leaves nothing the next run keeps.

Each export writes into `OUT/.vitexport-PID-XXXX/`. On success every file moves into `OUT` by
rename (the sidecar last, so it never names a missing artifact); on failure, Ctrl-C or another
termination signal the folder is removed; after a SIGKILL it stays, and the next run into `OUT`
removes it once its process is gone.

Publishing replaces only what vitexport wrote: an earlier artifact of the same name, known by its
sidecar (which lists every file the artifact consists of). A file, folder or link of the user's that
happens to have the name is refused (exit 2), unless the caller was told to `force` it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from vitexport.core.errors import OutputError, UsageError
# Staging folders and the writer's temporary files share PREFIX, so one sweep removes what dead runs left.
from vitexport.core.writer import PREFIX, ordinary_permissions


def prepare_out_dir(out_dir: str | Path) -> Path:
    """Create `out_dir`, prove it writable, and remove what dead runs left in it."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=f"{PREFIX}{os.getpid()}-probe-"):
            pass
    except OSError as e:
        raise OutputError(f"cannot write to output directory {out}: {e.strerror or e}") from None
    clean_stale(out)
    return out


def clean_stale(out: Path) -> list[Path]:
    """Remove staging folders (and stray temporary files) whose owning process no longer runs."""
    removed = []
    for entry in out.glob(PREFIX + "*"):
        pid = _owner(entry.name)
        if pid is None or _alive(pid):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _owner(name: str) -> int | None:
    """The PID in `.vitexport-PID-XXXX`; None for names this module did not make."""
    parts = name[len(PREFIX):].split("-", 1)
    return int(parts[0]) if parts[0].isdigit() else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to clean
        return True
    return True


@contextlib.contextmanager
def staging(out: Path):
    """A scratch folder inside the output folder (same file system, so publishing is a rename),
    removed on any failure or interrupt."""
    stage = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=out))
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def publishing_lock(out: Path):
    """One publisher at a time per folder, so concurrent exports of one name leave an artifact and the
    sidecar that describes it, never one's artifact beside the other's sidecar."""
    try:
        import fcntl
    except ImportError:  # Windows: renames are still atomic one by one
        yield
        return
    # Not an output: an empty lock file, opened to hold a flock, never written (so not through the writer).
    with open(out / ".vitexport.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def publish(stage: Path, out: Path, force: bool = False) -> list[Path]:
    """Move every staged entry into `out` with ordinary permissions; sidecars (.json) last. Nothing
    moves when one of the names is taken by something vitexport did not write (unless `force`)."""
    entries = sorted(stage.iterdir(), key=lambda p: p.name.endswith(".json"))
    with publishing_lock(out):
        if not force:
            check_replaceable(out, [e.name for e in entries])
        return [_move(entry, out) for entry in entries]


def check_replaceable(out: Path, names: list[str]) -> None:
    """Raise OutputError naming the first of `names` in `out` that vitexport may not replace: one that
    exists and is not a file of an earlier artifact published there (its sidecar says which are)."""
    taken = [name for name in names if os.path.lexists(out / name)]
    if not taken:
        return
    ours = owned_names(out, [n for n in names if n.endswith(".json")])
    for name in taken:
        if name not in ours:
            raise OutputError(f"{out / name} exists and was not written by vitexport; refusing to replace it "
                              "(move it away, choose another --out or --name, or pass --force to replace it)")


def owned_names(out: Path, sidecar_names: list[str]) -> set[str]:
    """Names in `out` that belong to the earlier artifacts whose sidecars are called `sidecar_names`:
    each readable vitexport sidecar, its artifact and the files it lists. A link is never ours."""
    from vitexport.export.sidecar import read_record_file

    owned: set[str] = set()
    for name in sidecar_names:
        path = out / name
        if path.is_symlink() or not path.is_file():
            continue
        try:
            record = read_record_file(path)
        except UsageError:  # not a sidecar of ours (or a damaged one): not proof of anything
            continue
        if record.artifact + ".json" != name:
            continue
        owned |= {name, *(f for f in {record.artifact, *record.files, *record.published}
                          if not (out / f).is_symlink())}
    return owned


def ensure_folder(path: Path) -> Path:
    """`path` as a folder vitexport may publish into (OUT/failed), created if missing."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{path} exists and is not a folder; vitexport keeps failed exports there "
                          "(move it away or choose another --out)")
    path.mkdir(exist_ok=True)
    return path


def _move(entry: Path, out: Path) -> Path:
    """Rename one staged file or package folder into `out`, replacing what was there."""
    ordinary_permissions(entry)
    target = out / entry.name
    if target.is_dir() and not target.is_symlink():
        # A directory cannot be renamed over a non-empty one: move the old one aside first.
        old = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-old-", dir=out))
        os.replace(target, old / entry.name)
        os.replace(entry, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(entry, target)
    return target
