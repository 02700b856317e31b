"""The Python API in a Jupyter notebook: results that display as tables, progress drawn as a bar in
place, and vitexport's errors shown as the one line the CLI prints.

- `Shown` is the dict the API returns (the `--json` output: `json.dumps` and `==` treat it as the plain
  dict it is) with an `_repr_html_`, so the last expression of a cell draws it: an export or a
  verification as its status, facts and parity checks; a bench report as its latency table and the
  report page inline; a package and an optimize run as what they made.
- `NotebookProgress` draws the steps of a long call as HTML through one IPython display handle,
  updated in place (no widgets, never terminal escape codes); `progress_for_api()` picks it inside
  a Jupyter kernel and stays silent elsewhere.
- `held_back()` holds back what libraries write to stderr while the API works in a kernel (C++ logs,
  warnings, converters' progress bars), as the CLI does on a terminal.
- `install_error_display()` registers an IPython handler through `InteractiveShell.set_custom_exc`:
  a vitexport error (and the API's TypeError for a wrong argument) shows as its message and what its
  exit code means, not as a traceback through vitexport's internals; `%tb` still shows the traceback.
  An error from the user's own code keeps its usual traceback.
- `api_call()` is what the API does around each call: the reporter, libraries held back, the bar closed.

Every string in a result is untrusted (a sidecar or report may come from elsewhere): what each kind
shows is plain data (notebook_views.py) and the markup comes from the template `notebook.html` alone,
autoescaped (templating.py). IPython is imported only when a notebook already runs it; Jinja2 and the
page renderer only when something is drawn.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from vitexport.core.errors import ExitCode, VitexportError
from vitexport.core.progress import SILENT, Progress
from vitexport.core.words import milliseconds

KINDS = ("export", "verify", "bench", "package", "optimize")

# What each exit code of the CLI means, in the words of the exit-code page.
MEANINGS = {
    ExitCode.FAILURE: "export or runtime error",
    ExitCode.USAGE: "bad usage or bad input",
    ExitCode.UNAVAILABLE: "unavailable on this machine",
    ExitCode.PARITY: "parity failed, or the artifact is damaged or changed",
    ExitCode.REGRESSION: "worse than the baseline beyond its margin",
}


class Shown(dict):
    """A result of the API: the plain `--json` dict, displayed in a notebook as a table. `kind` says
    what it is (one of `KINDS`); copies, pickles and `dict(result)` keep the data."""

    def __init__(self, result: dict, kind: str):
        if kind not in KINDS:
            raise ValueError(f"kind should be one of {', '.join(KINDS)}, not {kind!r}")
        super().__init__(result)
        self.kind = kind

    def __reduce__(self):
        return (Shown, (dict(self), self.kind))

    def _repr_html_(self) -> str:
        return html(self, self.kind)


def shown(result: dict, kind: str) -> Shown:
    """`result` (an API call's `--json` dict) as a `Shown` of `kind`: the same data, drawn in a notebook."""
    return result if isinstance(result, Shown) and result.kind == kind else Shown(result, kind)


def html(result: dict, kind: str) -> str:
    """The HTML a notebook shows for `result`, a `kind` of result."""
    from vitexport.report import notebook_views as views
    from vitexport.report import templating

    context = {"export": views.export, "verify": views.export, "bench": views.bench, "package": views.package,
               "optimize": views.optimize}[kind](result)
    return templating.render("notebook.html", view="result", kind=kind, **context).strip()


# ---------------------------------------------------------------------------------------- progress

def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (IPython's shell with a kernel behind it). IPython is never
    imported here: a kernel has imported it already."""
    if "IPython" not in sys.modules:
        return False
    shell = sys.modules["IPython"].get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress_for_api() -> Progress:
    """The API's reporter when the caller gives none: a bar in a notebook, nothing elsewhere (a script's
    terminal belongs to the script)."""
    return NotebookProgress() if in_kernel() else SILENT


@contextlib.contextmanager
def api_call(progress: Any = None) -> Iterator[Any]:
    """Around one call of the Python API: yields the reporter to pass on (the caller's `progress`,
    else a bar inside a Jupyter kernel, else none) and holds libraries' stderr back in a kernel. A bar
    made here is closed when the call ends, its last step drawn as stopped when the call raised.

        with notebook.api_call(progress) as progress:
            result = pipeline.export(..., progress=progress)
        return notebook.shown(result, "export")
    """
    if progress is not None:
        with held_back():
            yield progress
        return
    reporter = progress_for_api()
    with held_back():
        try:
            yield reporter
        except BaseException:
            if isinstance(reporter, NotebookProgress):
                reporter.abort()
            raise
    reporter.close()


_holding = False  # a call of the API inside another (bench of a module) holds nothing more


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """In a Jupyter kernel, what libraries write to stderr during the block goes to a temporary file
    instead of the cell's output: C and C++ logs through file descriptor 2, Python warnings and
    converters' progress bars through `sys.stderr`, and what helper processes inherit. With
    VITEXPORT_VERBOSE=1 it is shown after the block, under a heading saying whose it is. Outside a
    kernel nothing changes (the CLI holds its own back: vitexport.core.chatter)."""
    global _holding
    from vitexport.core import chatter

    if _holding or not in_kernel():
        yield
        return
    _holding = True
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)  # fd 2 and this stream share the file's offset: nothing overwrites
    stream = open(2, "w", buffering=1, errors="replace", closefd=False)
    try:
        with contextlib.redirect_stderr(stream):
            yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
        os.dup2(saved, 2)
        os.close(saved)
        _holding = False
        with held:
            held.seek(0)
            text = held.read().decode("utf-8", errors="replace").rstrip("\n")
        if text and chatter.verbose_from_environment():
            sys.stderr.write(f"--- what libraries wrote to stderr ---\n{text}\n--- end of library output ---\n")


def _display(obj: Any, **keywords: Any) -> Any:
    """IPython's `display` of `obj` (its handle, with `display_id=True`); nothing without IPython, where
    there is no notebook to draw in."""
    try:
        from IPython.display import display
    except ImportError:
        return None
    return display(obj, **keywords)


def duration(seconds: float) -> str:
    """A step's time: milliseconds below a second, then seconds to a tenth."""
    return milliseconds(1000 * seconds) if seconds < 1 else f"{seconds:.1f} s"


class _Drawing:
    """What one update displays: HTML for a notebook, plain lines for a frontend without it."""

    def __init__(self, markup: str, text: str):
        self.markup, self.text = markup, text

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.text


class NotebookProgress(Progress):
    """The steps of a call as HTML lines in the cell's output, redrawn in place through one display
    handle: each finished step with a check mark and its time, the current one with its note and, when
    counted, a bar. Redraws are at most every `interval` seconds but for a new step and the end."""

    def __init__(self, interval: float = 0.25, clock: Callable[[], float] = time.monotonic):
        self.interval, self.clock = interval, clock
        self.done: list[tuple[str, float]] = []
        self.current: dict[str, Any] | None = None
        self.handle = None
        self.drawn_at = -math.inf

    def step(self, name: str, total: int | None = None) -> None:
        self._finish()
        self.current = {"name": name, "note": "", "done": 0, "total": total, "start": self.clock()}
        self._draw(now=True)

    def note(self, text: str) -> None:
        if self.current is not None:
            self.current["note"] = text
            self._draw()

    def advance(self, n: int = 1) -> None:
        if self.current is not None:
            self.current["done"] += n
            self._draw()

    def close(self) -> None:
        self._finish()
        if self.handle is not None:
            self._draw(now=True)

    def abort(self) -> None:
        """The call failed: its current step is drawn as stopped, not as done."""
        if self.current is not None:
            self.current["stopped"] = True
            self._draw(now=True)
            self.current = None

    def drawing(self) -> _Drawing:
        """What the cell shows now."""
        from vitexport.report import templating

        now = self.clock()
        steps = [{"name": name, "time": duration(seconds)} for name, seconds in self.done]
        current = None
        if self.current is not None:
            c = self.current
            total = c["total"]
            current = {"name": c["name"], "note": c["note"], "total": total, "stopped": c.get("stopped", False),
                       "done": min(c["done"], total) if total is not None else c["done"],
                       "time": duration(now - c["start"])}
        markup = templating.render("notebook.html", view="progress", steps=steps, current=current).strip()
        lines = [f"✓ {s['name']} {s['time']}" for s in steps]
        if current is not None:
            count = f" {current['done']}/{current['total']}" if current["total"] is not None else ""
            mark = "✗" if current["stopped"] else "…"
            lines.append(f"{mark} {current['name']}{': ' + current['note'] if current['note'] else ''}{count}"
                         + (" (stopped)" if current["stopped"] else ""))
        return _Drawing(markup, "\n".join(lines))

    def _finish(self) -> None:
        if self.current is not None:
            self.done.append((self.current["name"], self.clock() - self.current["start"]))
            self.current = None

    def _draw(self, now: bool = False) -> None:
        if not now and self.clock() - self.drawn_at < self.interval:
            return
        self.drawn_at = self.clock()
        if self.handle is None:
            self.handle = _display(self.drawing(), display_id=True)
        else:
            self.handle.update(self.drawing())


# ------------------------------------------------------------------------------------------ errors

def is_ours(error: BaseException) -> bool:
    """Whether `error` is vitexport's to explain in one line: a VitexportError, or a TypeError the API
    raised about an argument (its message names `api.FUNCTION`, raised inside vitexport). A TypeError
    from the user's model, or from a bug inside vitexport, keeps its traceback."""
    if isinstance(error, VitexportError):
        return True
    if not isinstance(error, TypeError) or not str(error).startswith("api."):
        return False
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    package = Path(__file__).resolve().parents[1]
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(package)


def _parts(error: BaseException) -> tuple[str, str, str]:
    """(label, message on one line, what its exit code means): a TypeError of the API is bad usage."""
    code = int(getattr(error, "exit_code", ExitCode.USAGE))
    label = "parity failed" if code == ExitCode.PARITY else "regression" if code == ExitCode.REGRESSION else "error"
    return label, " ".join(str(error).split()), f"exit {code}: {MEANINGS.get(code, 'error')}"


def error_line(error: BaseException) -> str:
    """The error as one line: the message (which says the fix) and what its exit code would mean."""
    label, message, meaning = _parts(error)
    return f"{label}: {message} ({meaning})"


def error_drawing(error: BaseException) -> _Drawing:
    from vitexport.report import templating

    label, message, meaning = _parts(error)
    markup = templating.render("notebook.html", view="error", label=f"{label}:", message=message,
                               meaning=meaning).strip()
    return _Drawing(markup, error_line(error))


def _handler(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler: one line for vitexport's errors, the usual traceback for the rest."""
    if not is_ours(value):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # %tb shows where it came from
    if sys.version_info >= (3, 12):
        sys.last_exc = value
    _display(error_drawing(value))
    result = getattr(value, "result", None)
    kind = kind_of(result) if isinstance(result, dict) else None
    if kind is not None:  # what failed its check or its baseline: the table says where
        _display(Shown(result, kind))
    return None


def kind_of(result: dict) -> str | None:
    """Which kind of result an error carries (a ParityError's or RegressionError's), if one shown here."""
    if isinstance(result.get("candidates"), list):
        return "optimize"
    if isinstance(result.get("results"), list):
        return "bench"
    if isinstance(result.get("parity"), dict):
        return "verify" if "artifact_modified" in result else "export"
    return None


def install_error_display(shell: Any = None) -> bool:
    """In IPython (a notebook's kernel), show vitexport's errors as one line instead of a traceback;
    return whether a shell was there to install into. Calling it again changes nothing; it takes the
    place of a custom exception handler set before (IPython keeps one)."""
    if shell is None:
        if "IPython" not in sys.modules:
            return False
        shell = sys.modules["IPython"].get_ipython()
        if shell is None:
            return False
    shell.set_custom_exc((VitexportError, TypeError), _handler)
    return True
