"""How the CLI shows progress: rich bars on stderr when it is a terminal, short "… step" lines
when it is a file or a pipe (a log keeps one line per step, not redrawn bars), nothing with
--quiet or when stdout carries JSON. The library only calls the `vitexport.core.progress` protocol.
Imported by CLI commands when they run, never by `vitexport --help`."""

from __future__ import annotations

import contextlib
from typing import Iterator

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text

from vitexport.core import chatter
from vitexport.core.progress import SILENT, Lines, Progress


class Counted(ProgressColumn):
    """A column shown only for steps with a count: a bar or an ETA of an uncounted step says nothing."""

    def __init__(self, column: ProgressColumn):
        super().__init__()
        self.column = column

    def render(self, task):
        return self.column.render(task) if task.fields.get("counted") else Text("")


class Bars(Progress):
    """One line per step, kept when it is done (with its time); a counted step gets a bar, its
    count and an ETA, an uncounted one a spinner."""

    def __init__(self, console):
        self.bars = RichProgress(
            SpinnerColumn(finished_text="[green]✓[/green]"), TextColumn("{task.description}"),
            Counted(BarColumn(bar_width=24)), Counted(MofNCompleteColumn()), TimeElapsedColumn(),
            Counted(TimeRemainingColumn()), console=console, transient=False)
        self.task, self.name = None, ""

    def step(self, name: str, total: int | None = None) -> None:
        self._finish()
        if not self.bars.live.is_started:
            self.bars.start()
        self.name = name
        self.task = self.bars.add_task(escape(name), total=total, counted=total is not None)

    def note(self, text: str) -> None:
        if self.task is not None:
            self.bars.update(self.task, description=escape(f"{self.name}: {text}"))

    def advance(self, n: int = 1) -> None:
        if self.task is not None:
            self.bars.advance(self.task, n)

    def close(self) -> None:
        self._finish()
        self.bars.stop()

    def abort(self) -> None:
        """Stop drawing without marking the step that failed as done."""
        self.bars.stop()

    def _finish(self) -> None:
        """Mark the step done: full bar, its name without the last note, the spinner a check mark."""
        if self.task is None:
            return
        task = next(t for t in self.bars.tasks if t.id == self.task)
        total = task.total if task.total is not None else 1
        self.bars.update(self.task, total=total, completed=total, description=escape(self.name))
        self.bars.stop_task(self.task)
        self.task = None


def lines_on_stderr() -> Lines:
    from vitexport.report.console import stderr_console

    console = stderr_console()
    return Lines(lambda message: console.print(f"[dim]… {escape(message)}[/dim]", highlight=False, soft_wrap=True))


@contextlib.contextmanager
def reporter(*, quiet: bool = False, machine_output: bool = False, stream=None) -> Iterator[Progress]:
    """The progress reporter for one command: nothing with --quiet or JSON on stdout, bars when
    `stream` (stderr) is a terminal, lines otherwise. Bars are stopped before the block's result is
    printed, also when it raises."""
    stream = stream if stream is not None else chatter.stderr()
    if quiet or machine_output:
        yield SILENT
        return
    if not _is_terminal(stream):
        yield lines_on_stderr()
        return
    from vitexport.report.console import stderr_console

    bars = Bars(stderr_console())
    try:
        yield bars
    except BaseException:
        bars.abort()
        raise
    bars.close()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False
