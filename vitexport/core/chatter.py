"""Libraries' output held back while a command runs, so that only vitexport's own words reach the
terminal: torch's deprecation warnings, ONNX Runtime's and ExecuTorch's C++ log lines, NNCF's
progress. Everything written to file descriptor 2 during the command (Python warnings and loggers
as well as C and C++ code, which bypass `sys.stderr`) goes to a temporary file instead; vitexport's
own lines go to the real stderr through `stderr()`. With `--verbose` (or VITEXPORT_VERBOSE=1) the
held lines are shown after the command, under a heading that says whose they are."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import TextIO

_terminal: TextIO | None = None  # the real stderr while library output is held back


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
    """Hold libraries' stderr for the block; show it afterwards when `verbose`."""
    global _terminal
    if _terminal is not None or not _real_stderr():  # nested, or nothing to hold back
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    _terminal = os.fdopen(os.dup(saved), "w", buffering=1, errors="replace")
    try:
        yield
    finally:
        for stream in (sys.stderr, _terminal):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os.dup2(saved, 2)
        os.close(saved)
        with contextlib.suppress(OSError, ValueError):
            _terminal.close()
        _terminal = None
        _show(held, verbose)


def _show(held, verbose: bool) -> None:
    with held:
        if not verbose:
            return
        held.seek(0)
        text = held.read().decode("utf-8", errors="replace").rstrip("\n")
    if text:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"--- what libraries wrote to stderr ---\n{text}\n--- end of library output ---\n")
            sys.stderr.flush()
