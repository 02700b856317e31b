"""How long-running work says how far it is. The library calls a `Progress`; the CLI decides what
it looks like (bars on a terminal, one short line per step in a log, nothing with --quiet), so no
rendering library is imported here.

    progress.step("checking against PyTorch", total=3)   # a new step; `total`: how many parts it has
    progress.note("random-b1")                            # what the step is doing now
    progress.advance()                                    # one part done

Code deep inside a backend (a calibration loop) reports through `current()`, the reporter of the
export or benchmark running now, instead of taking a parameter through every signature.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator, Union


class Progress:
    """Reports nothing: the default, and the base of every reporter."""

    def step(self, name: str, total: int | None = None) -> None:
        """A new step begins (the previous one is over); with `total`, `advance()` counts towards it."""

    def note(self, text: str) -> None:
        """What the current step is doing now."""

    def advance(self, n: int = 1) -> None:
        """`n` more parts of the current step are done."""

    def close(self) -> None:
        """No more steps."""

    def __call__(self, message: str) -> None:
        # A plain message is a step: code written for the one-argument callback keeps working.
        self.step(message)


class Lines(Progress):
    """One short line per step and per note, through `write` ('checking against PyTorch: random-b1')."""

    def __init__(self, write: Callable[[str], None]):
        self.write, self.current = write, ""

    def step(self, name: str, total: int | None = None) -> None:
        self.current = name
        self.write(name)

    def note(self, text: str) -> None:
        self.write(f"{self.current}: {text}" if self.current else text)


ProgressLike = Union[Progress, Callable[[str], None], None]
SILENT = Progress()
_current: ContextVar[Progress | None] = ContextVar("vitexport_progress", default=None)


def as_progress(progress: ProgressLike) -> Progress:
    """A Progress from what callers pass: a Progress, a `progress(message)` function, or None."""
    if progress is None:
        return SILENT
    if isinstance(progress, Progress):
        return progress
    if callable(progress):
        return Lines(progress)
    raise TypeError(f"progress must be a Progress or a callable, not {type(progress).__name__}")


def current() -> Progress:
    """The reporter of the export, verification or benchmark running now (silent outside one)."""
    return _current.get() or SILENT


@contextlib.contextmanager
def using(progress: ProgressLike) -> Iterator[Progress]:
    """Make `progress` the `current()` reporter for the block."""
    reporter = as_progress(progress)
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)
