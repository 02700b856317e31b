"""Reading JSON files that a user (or an attacker) hands us: sidecars, bench reports, baselines,
device reports, manifests, caches, hf: configs. Every reader goes through `read_json`, so each takes
any bytes and answers the same way: what it reads is bounded before it is parsed (a FIFO, `/dev/zero`,
a huge or deeply nested file ends in one clear line, exit 2, instead of a hang, a memory blow-up or a
RecursionError), and what the standard library parses but no reader of ours was written for is
refused there too, naming the file and where in it:

- a byte-order mark, or bytes that are not UTF-8 (the line and column of the first bad byte);
- the same key twice in one object (which value would be used is a guess nobody validated);
- a number with more digits than any field holds (Python refuses to convert integers beyond 4,300
  digits, and a float's largest value has 309);
- text holding a lone surrogate (which no file or terminal can be written with) or a control
  character other than tab, newline and carriage return (which rewrites what a terminal shows).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError

MAX_BYTES = 64 * 2**20  # far above any report vitexport writes (a 1,000-row bench report is ~2 MB)
MAX_DEPTH = 32  # vitexport's own files nest at most ~8 deep
# More digits than the largest finite double (~1.8e308, 309 digits): a number no field can hold.
MAX_DIGITS = 400
BOMS = {b"\xef\xbb\xbf": "UTF-8", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}
# Lone surrogates and C0 controls but tab, newline and carriage return.
UNWRITABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")


class _Huge:
    """A number too long to convert, kept as its digit count until its place is known."""

    def __init__(self, digits: int):
        self.digits = digits


class _Repeated(dict):
    """An object in which a key appeared twice, kept until its place is known."""

    repeated: str = ""


def _number(text: str, convert):
    return _Huge(len(text)) if len(text) > MAX_DIGITS else convert(text)


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
    marked = _Repeated(value)
    marked.repeated = repeated
    return marked


def read_json(path: str | Path, what: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
              error: type[UsageError] = UsageError) -> Any:
    """The parsed contents of `path`, or `error` naming the file, `what` it should be and where it is wrong."""
    path = Path(path)
    data = read_bounded(path, what, max_bytes, error)
    return parse(data, f"{what} {path}", max_depth=max_depth, error=error)


def parse(data: bytes, named: str, *, max_depth: int = MAX_DEPTH, error: type[UsageError] = UsageError) -> Any:
    """`data` parsed as JSON, or `error` starting with `named` (what the bytes are, and whence)."""
    for bom, encoding in BOMS.items():
        if data.startswith(bom):
            raise error(f"cannot read {named}: it is not readable JSON (it begins with a {encoding} byte-order "
                        "mark; save it as UTF-8 without one)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column = _place(data, e.start)
        raise error(f"cannot read {named}: it is not readable JSON (not UTF-8 text: byte 0x{data[e.start]:02x} "
                    f"at line {line}, column {column})") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=lambda t: _number(t, int),
                           parse_float=lambda t: _number(t, float))
    except json.JSONDecodeError as e:
        raise error(f"cannot read {named}: it is not readable JSON ({e.msg} at line {e.lineno}, column "
                    f"{e.colno})") from None
    except RecursionError:
        raise error(f"{named} is nested more than {max_depth} levels deep") from None
    problem = inspect(value, max_depth)
    if problem:
        raise error(f"cannot read {named}: {problem}")
    return value


def _place(data: bytes, offset: int) -> tuple[int, int]:
    """Line and column (1-based, in bytes) of `offset`."""
    line = data.count(b"\n", 0, offset) + 1
    return line, offset - (data.rfind(b"\n", 0, offset) + 1) + 1


def inspect(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """What no reader takes in parsed JSON (see the module's note), with its path; None when nothing.
    Walked without recursion, in document order."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, here = stack.pop()
        if isinstance(item, (dict, list)) and len(here) >= max_depth:
            return f"it is nested more than {max_depth} levels deep"
        if isinstance(item, _Huge):
            return f"{where(here)}: a number of {item.digits} digits is beyond what any field holds"
        if isinstance(item, str):
            bad = UNWRITABLE.search(item)
            if bad:
                return f"{where(here)}: the text holds {_char(bad.group())}, which no field takes"
        elif isinstance(item, dict):
            if isinstance(item, _Repeated):
                return f"{where(here + (item.repeated,))}: the key {item.repeated!r} is given twice"
            for key in item:
                bad = UNWRITABLE.search(key)
                if bad:
                    return f"{where(here + (key,))}: the key holds {_char(bad.group())}, which no field takes"
            stack.extend(reversed([(child, here + (key,)) for key, child in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([(child, here + (i,)) for i, child in enumerate(item)]))
    return None


def _char(c: str) -> str:
    kind = "a lone surrogate" if "\ud800" <= c <= "\udfff" else "the control character"
    return f"{kind} U+{ord(c):04X}"


def where(path: tuple) -> str:
    """A place in a document as the schemas' messages name it: `results[0].latency_ms.p50`."""
    text = ""
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            shown = step if re.fullmatch(r"[A-Za-z_][\w-]*", step) else json.dumps(step)
            text += f".{shown}" if text else shown
    return text or "the top level"


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

