"""The one door every file vitexport writes goes through: artifacts' sidecars, `--json PATH`, report
sets (JSON, CSV, Markdown, PNG, HTML), pages, package files, matrix outputs, caches.

Before any work, `check` refuses a path it may not write (OutputError, exit 2, naming it):
- a parent that is a file, or a folder that cannot be written;
- one of the run's own inputs (a report given, a baseline, weights), even with `force`;
- anything there that vitexport did not write: a link, a folder, a FIFO, or a file that `ours` does
  not recognise as vitexport's (its marks: a report's `schema`, a page's generator tag, an artifact's
  sidecar, a package's manifest), unless the command was told to `force` it.

`write` and `write_together` check again, then write each file under a temporary name in the same
folder (`.vitexport-PID-...`, which the next run removes should this process be killed outright) and
rename it into place only when every file is complete: the earlier file stays until then. An OSError
while writing (a full disk, a quota, a read-only file system) is WriteError: one line naming the
path, and nothing partial left behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Union

from vitexport.core.errors import OutputError, WriteError

PREFIX = ".vitexport-"  # temporary files and staging folders: `.vitexport-PID-...`
# What to write: text, bytes, or a function that writes the file at the path it is given.
Content = Union[str, bytes, Callable[[Path], None]]
Ours = Callable[[Path], bool]
# Errors that say the disk, not the request, is at fault: shown as such.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO}


def nothing_is_ours(path: Path) -> bool:
    return False


def check(path: str | Path, *, ours: Ours = nothing_is_ours, inputs: Iterable[str | Path] = (), force: bool = False,
          flag: str = "--out", forceable: bool = False) -> Path:
    """Refuse `path` (OutputError naming it) unless vitexport may write there; create its folder.
    `flag` names the option the path came from; `forceable`: the command has `--force`."""
    path = Path(path)
    check_parent(path, flag)
    check_target(path, ours=ours, inputs=inputs, force=force, flag=flag, forceable=forceable)
    return path


def check_parent(path: Path, flag: str = "--out") -> Path:
    """Create the folder `path` goes into; OutputError when a parent is a file or it cannot be written."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{flag} {path}: {_file_above(folder)} is a file, not a folder") from None
    except NotADirectoryError:
        raise OutputError(f"{flag} {path}: {_file_above(folder)} is a file, not a folder") from None
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot create {folder}: {e.strerror or e}") from None
    if not folder.is_dir():  # a link to a file, say
        raise OutputError(f"{flag} {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: cannot write into {folder} (permission denied)")
    return folder


def folder(path: str | Path, flag: str = "--out", create: bool = True) -> Path:
    """`path`, a folder vitexport makes for itself under the user's `flag` folder (a cache, a log
    folder), created if missing (unless not `create`: then only checked, if there); OutputError naming
    it when it is a file, a link or cannot be written. Called before any work, so that a file in its
    place is a refusal, not an error half-way."""
    path = Path(path)
    if not create and not os.path.lexists(path):
        return path
    if path.is_symlink():
        raise OutputError(f"{flag}: {path} is a link; vitexport keeps a folder of its own there (move it away or "
                          f"give another {flag})")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputError(f"{flag}: {_file_above(path)} is a file, not a folder; vitexport keeps a folder of its own "
                          f"at {path} (move it away or give another {flag})") from None
    except OSError as e:
        raise OutputError(f"{flag}: cannot create {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"{flag}: cannot write into {path} (permission denied)")
    return path


def _file_above(folder: Path) -> Path:
    """The nearest existing ancestor of `folder` that is not a folder (what blocked mkdir)."""
    for candidate in [folder, *folder.parents]:
        if os.path.lexists(candidate):
            return candidate if not candidate.is_dir() else folder
    return folder


def check_target(path: Path, *, ours: Ours = nothing_is_ours, inputs: Iterable[str | Path] = (), force: bool = False,
                 flag: str = "--out", forceable: bool = False) -> None:
    """OutputError when `path` holds one of `inputs`, or something vitexport did not write (unless `force`)."""
    if not os.path.lexists(path):
        return
    for given in inputs:
        if is_same(path, Path(given)):
            raise OutputError(f"{path} is one of this run's inputs; writing there would replace it: give another "
                              f"{flag}")
    if force:
        return
    regular = path.is_file() and not path.is_symlink()
    if not (regular and ours(path)):
        hint = ", or pass --force to replace it" if forceable else ""
        raise OutputError(f"{path} exists and was not written by vitexport; refusing to replace it (move it away "
                          f"or give another {flag}{hint})")


def is_same(a: Path, b: Path) -> bool:
    try:
        return os.path.lexists(b) and (os.path.samefile(a, b) or Path(os.path.abspath(a)) == Path(os.path.abspath(b)))
    except OSError:
        return Path(os.path.abspath(a)) == Path(os.path.abspath(b))


def write(path: str | Path, content: Content, *, ours: Ours = nothing_is_ours, inputs: Iterable[str | Path] = (),
          force: bool = False, flag: str = "--out") -> Path:
    """Write one file whole (see the module's docstring); return its path."""
    return write_together({Path(path): content}, ours=ours, inputs=inputs, force=force, flag=flag)[0]


def write_together(files: dict[Path, Content], *, ours: Ours = nothing_is_ours, inputs: Iterable[str | Path] = (),
                   force: bool = False, flag: str = "--out") -> list[Path]:
    """Write several files as one: each under a temporary name, all renamed into place (in the order
    given: put the file that marks the set as vitexport's last) only when every one is complete."""
    inputs = list(inputs)
    paths = [Path(p) for p in files]
    for path in paths:
        check(path, ours=ours, inputs=inputs, force=force, flag=flag)
    temps: list[Path] = []
    try:
        for path, content in zip(paths, files.values()):
            temps.append(temporary(path))
            fill(temps[-1], content, shown=path)
        for tmp, path in zip(temps, paths):
            try:
                os.replace(tmp, path)
            except OSError as e:
                raise WriteError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return paths


def temporary(path: Path) -> Path:
    """A fresh, empty file beside `path`, named so that a later run removes it if this one is killed."""
    try:
        # The name's end kept: writers that choose the format by suffix (a PNG plot) still see it.
        fd, name = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", suffix=f"-{path.name}"[-80:], dir=path.parent)
    except OSError as e:
        raise WriteError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    return Path(name)


def fill(path: Path, content: Content, shown: Path | None = None) -> Path:
    """Write `content` to `path` (a temporary file, or a file in a staging folder that is published
    whole), flushed to disk, with ordinary permissions; WriteError naming it (or `shown`, the final
    path a temporary file stands for) on a disk error."""
    path = Path(path)
    try:
        if callable(content):
            content(path)
        else:
            # A lone surrogate (a file name that is not UTF-8, carried in a path) is written escaped.
            data = content.encode("utf-8", errors="backslashreplace") if isinstance(content, str) else content
            with open(path, "wb") as f:  # the one place vitexport writes a file's bytes itself
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # a full disk may only say so here (delayed allocation)
        ordinary_permissions(path)
    except OSError as e:
        path.unlink(missing_ok=True)
        raise WriteError(f"cannot write {shown or path}: {e.strerror or e}") from None
    return path


@contextlib.contextmanager
def atomic_path(final: str | Path):
    """Yield a temporary path beside `final` for a library that writes files itself (TensorRT,
    Core ML); on success rename it into place, on any failure (Ctrl-C included) remove it."""
    final = Path(final)
    check_parent(final)
    tmp = temporary(final)
    try:
        yield tmp
        try:
            if tmp.exists():
                ordinary_permissions(tmp)
            os.replace(tmp, final)
        except OSError as e:
            raise WriteError(f"cannot write {final}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def write_atomic(final: str | Path, data: str | bytes) -> Path:
    """`final` replaced whole by `data` (a file vitexport owns by construction: a sidecar, a cache entry)."""
    return write(final, data, force=True)


def ordinary_permissions(path: Path) -> None:
    """Files as open() makes them under the user's umask (mkstemp-style writers make them 0600, and a
    server running as another user could then read an ONNX graph but not its weights); folders alike."""
    umask = os.umask(0)
    os.umask(umask)
    path = Path(path)
    targets = [path, *path.rglob("*")] if path.is_dir() else [path]
    for p in targets:
        if p.is_symlink():
            continue
        mode = 0o777 if p.is_dir() else 0o666
        os.chmod(p, mode & ~umask)


def disk_error(e: OSError) -> str | None:
    """One line for an OSError that is the disk's fault (full, over quota, read-only), else None."""
    if e.errno not in DISK_ERRNOS:
        return None
    where = f" ({e.filename})" if e.filename else ""
    return f"cannot write{where}: {e.strerror or os.strerror(e.errno)}"


def json_report_is_ours(path: Path) -> bool:
    """A JSON file vitexport wrote: one object whose `schema` names a vitexport schema."""
    from vitexport.core.errors import UsageError
    from vitexport.core.jsonfile import read_json

    try:
        data = read_json(path, "report")
    except UsageError:
        return False
    schema = data.get("schema") if isinstance(data, dict) else None
    return isinstance(schema, str) and schema.startswith("vitexport.")
