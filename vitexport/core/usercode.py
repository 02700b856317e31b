"""What a user's own code did when it failed (a factory, a `file.py:` or `pkg.module:` source, a
model's forward pass), said in one line that is the user's to read: the exception's type and its
message, the user's frame it was raised at (file and line), and, when the message is empty, the last
lines the code wrote to stderr (held back while a command runs, so otherwise unseen).

`SystemExit` and `KeyboardInterrupt` raised by that code (an argparse script's `sys.exit(2)` after its
usage line) are failures of the code like any other, never vitexport's own exit; a KeyboardInterrupt
that a real Ctrl-C raised while the code ran stays an interruption."""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

from vitexport.core import chatter, termination
from vitexport.core.errors import SourceError, explained

# What user code may raise that is caught and described (Terminated, a signal's, is never caught).
RAISED = (Exception, SystemExit, KeyboardInterrupt)
_VITEXPORT = str(Path(__file__).resolve().parents[1])
_LIBRARIES = {os.path.realpath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
              if (p := sysconfig.get_paths().get(key))}


def failed(who: str, error: BaseException, position: int | None, kind: type[SourceError] = SourceError) -> SourceError:
    """`kind` (a SourceError: the user's model, exit 2) saying how `who` failed with `error`;
    `position`: `chatter.mark()` taken before the code ran. A genuine Ctrl-C is raised again."""
    if isinstance(error, KeyboardInterrupt) and termination.by_signal():
        raise error
    return kind(described(who, error, position))


def described(who: str, error: BaseException, position: int | None = None) -> str:
    """One line: who failed, how, where in the user's code, and what it wrote when it said nothing."""
    if isinstance(error, SystemExit):
        message = "" if error.code is None or isinstance(error.code, int) else str(error.code)
        how = f"{who} called sys.exit({error.code!r})"
    else:
        message = explained(error, default="")
        how = f"{who} failed: {type(error).__name__}" + (f": {message}" if message else " (with no message)")
    frame = users_frame(error)
    if frame:
        how += f" at {frame}"
    said = chatter.written_since(position) if not message else []
    if said:
        how += "; it wrote to stderr: " + " | ".join(said)
    return how


def raised(error: BaseException) -> str:
    """`Type: message` of what a library raised while it ran the user's model (a tracer, a converter),
    the message whole, with the frame of the user's code it came through when there is one."""
    frame = users_frame(error)
    return f"{type(error).__name__}: {explained(error, default='(no message)')}" + (
        f" (raised at {frame})" if frame else "")


def users_frame(error: BaseException) -> str | None:
    """`file:line in function` of the innermost frame of the traceback in code that is neither
    vitexport's, the standard library's nor an installed package's; None when there is none."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    for frame in reversed(frames):
        if theirs(frame.filename):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return None


def theirs(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = os.path.realpath(filename)
    return not path.startswith(_VITEXPORT + os.sep) and not any(path.startswith(lib + os.sep) for lib in _LIBRARIES)
