"""Reading JSON files that a user (or an attacker) hands us: sidecars, bench reports, baselines,
device reports, plans' sidecars. Each is bounded before it is parsed, so a FIFO, `/dev/zero`, a huge
file or a deeply nested one ends in one clear line (exit 2) instead of a hang, a memory blow-up or a
RecursionError deep inside the code that walks it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError

MAX_BYTES = 64 * 2**20  # far above any report vitexport writes (a 1,000-row bench report is ~2 MB)
MAX_DEPTH = 32  # vitexport's own files nest at most ~8 deep


def read_json(path: str | Path, what: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
              error: type[UsageError] = UsageError) -> Any:
    """The parsed contents of `path`, or `error` naming the file and `what` it should be."""
    path = Path(path)
    data = read_bounded(path, what, max_bytes, error)
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise error(f"cannot read {what} {path}: it is not readable JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise error(f"cannot read {what} {path}: it is not readable JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise error(f"{what} {path} is nested more than {max_depth} levels deep") from None
    if depth(value) > max_depth:
        raise error(f"{what} {path} is nested more than {max_depth} levels deep")
    return value


def read_bounded(path: Path, what: str, max_bytes: int = MAX_BYTES, error: type[UsageError] = UsageError) -> bytes:
    """The bytes of a regular file no larger than `max_bytes`. The file is opened non-blocking and
    checked with fstat on that open descriptor, so a FIFO cannot hang the open nor be swapped in
    after the check."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise error(f"cannot read {what} {path}: it does not exist") from None
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise error(f"{what} {path} is {kind}")
        if info.st_size > max_bytes:
            raise error(f"{what} {path} is {info.st_size / 2**20:.0f} MiB; more than {max_bytes / 2**20:.0f} MiB "
                        "is not something vitexport wrote")
        chunks, total = [], 0
        while True:  # the size can change while we read: bound what is read, not what stat said
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise error(f"{what} {path} grew beyond {max_bytes / 2**20:.0f} MiB while being read")
        return b"".join(chunks)
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest
