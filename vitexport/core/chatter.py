"""Libraries' output held back while a command runs, so that only vitexport's own words reach the
terminal: torch's deprecation warnings, ONNX Runtime's and ExecuTorch's C++ log lines, NNCF's
progress. Everything written to file descriptor 2 during the command (Python warnings and loggers
as well as C and C++ code, which bypass `sys.stderr`) goes to a temporary file instead; vitexport's
own lines go to the real stderr through `stderr()`. With `--verbose` (or VITEXPORT_VERBOSE=1) the
held lines are shown after the command, under a heading that says whose they are.

When the command fails (any exit but 0, a refusal of the user's input (2) or an interruption), the
held lines are usually what explains it (OpenVINO's exception names a source line; its log names the
op it could not convert): the ones that may explain it are shown then too, trimmed (`relevant`), with
a line saying that `--verbose` shows all. A crash by a signal (a segfault in a library) is reported on
the real stderr by faulthandler, with the Python frames it happened in."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import BinaryIO, TextIO

_terminal: TextIO | None = None  # the real stderr while library output is held back
_held: BinaryIO | None = None  # where file descriptor 2 writes meanwhile

SHOWN_LAST = 8  # the failing library's last lines
SHOWN_EARLIER = 12  # earlier lines that name an op, a file or an error
LINE_CHARS = 300
# A line that names an error, an op (aten::FloatImplicit, onnx::Gather) or a file and line.
NAMES_A_CAUSE = re.compile(r"error|fail|exception|abort|unsupported|not supported|no conversion|cannot|can't|unable|"
                           r"invalid|missing|not found|\w::\w|\.\w{1,5}:\d+", re.IGNORECASE)


def stderr() -> TextIO:
    """Where vitexport's own lines for stderr go: the real stderr, also while libraries' are held."""
    return _terminal if _terminal is not None else sys.stderr


def verbose_from_environment() -> bool:
    return os.environ.get("VITEXPORT_VERBOSE", "").strip().lower() not in ("", "0", "false", "no")


def _real_stderr() -> bool:
    """Only a process whose sys.stderr is file descriptor 2 holds it back (not an in-process test
    runner, whose stream is a buffer that vitexport's own lines must still reach)."""
    try:
        return sys.stderr is not None and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def held_back(verbose: bool = False) -> Iterator[None]:
    """Hold libraries' stderr for the block; show it afterwards when `verbose`, and the lines that may
    explain a failure when the block fails (see the module's note)."""
    global _terminal, _held
    if _terminal is not None or not _real_stderr():  # nested, or nothing to hold back
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    _terminal = os.fdopen(os.dup(saved), "w", buffering=1, errors="backslashreplace")
    _held = held
    faulted = faulthandler.is_enabled()
    faulthandler.enable(file=_terminal)  # a crash by a signal still names itself, on the real stderr
    failure: BaseException | None = None
    try:
        yield
    except BaseException as e:
        failure = e
        raise
    finally:
        for stream in (sys.stderr, _terminal):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if faulted:
            faulthandler.enable(file=sys.stderr)
        else:
            faulthandler.disable()
        with contextlib.suppress(OSError, ValueError):
            _terminal.close()
        _terminal, _held = None, None
        _show(held, verbose, explains(failure))


def explains(failure: BaseException | None) -> bool:
    """Whether held lines may explain how the command ended: a failure, not a success, a refusal of
    the user's input (exit 2: the refusal says why) nor an interruption (the user knows why)."""
    if failure is None or isinstance(failure, KeyboardInterrupt):
        return False
    code = failure.code if isinstance(failure, SystemExit) else getattr(failure, "exit_code", 1)
    return isinstance(code, int) and code not in (0, 2) and code < 128


def _show(held, verbose: bool, failed: bool) -> None:
    with held:
        if not (verbose or failed):
            return
        held.seek(0)
        text = held.read().decode("utf-8", errors="replace").rstrip("\n")
    if not text:
        return
    if verbose:
        shown = f"--- what libraries wrote to stderr ---\n{text}\n--- end of library output ---\n"
    else:
        lines = [line for line in (_last_overwrite(raw) for raw in text.splitlines()) if line.strip()]
        picked = relevant(lines)
        if not picked:
            return
        count = f"all {len(lines)} lines" if len(picked) == len(lines) else f"{len(picked)} of {len(lines)} lines"
        shown = (f"--- what libraries wrote to stderr before the failure ({count}; --verbose shows all) ---\n"
                 + "\n".join(picked) + "\n--- end of library output ---\n")
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(shown)
        sys.stderr.flush()


def _last_overwrite(line: str) -> str:
    """What a terminal would show of a line a progress bar rewrote with carriage returns."""
    return line.rstrip("\r").rsplit("\r", 1)[-1].rstrip()


def relevant(lines: list[str]) -> list[str]:
    """The held lines that may explain a failure, in their order: the last few (the failing library
    speaks last) and, before them, the latest that name an error, an op or a file; each at most
    LINE_CHARS long, a line repeated in a row shown once."""
    last = max(0, len(lines) - SHOWN_LAST)
    earlier = [i for i in range(last) if NAMES_A_CAUSE.search(lines[i])][-SHOWN_EARLIER:]
    picked: list[str] = []
    for i in [*earlier, *range(last, len(lines))]:
        line = lines[i] if len(lines[i]) <= LINE_CHARS else lines[i][:LINE_CHARS - 1] + "…"
        if not picked or picked[-1] != line:
            picked.append(line)
    return picked


def mark() -> int | None:
    """Where the held output stands now (None when nothing is held): give it to `written_since`."""
    if _held is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    return os.fstat(_held.fileno()).st_size


def written_since(position: int | None, count: int = 5, limit: int = 1 << 16) -> list[str]:
    """The last `count` non-empty lines written to stderr since `mark()` gave `position` (none when
    nothing was held): what a user's code printed before it failed."""
    if position is None or _held is None:
        return []
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    end = os.fstat(_held.fileno()).st_size
    start = max(position, end - limit)
    # pread: file descriptor 2 shares this file's offset, which a seek would move under later writes.
    data = os.pread(_held.fileno(), end - start, start).decode("utf-8", errors="replace")
    return [line for line in (_last_overwrite(raw) for raw in data.splitlines()) if line.strip()][-count:]
