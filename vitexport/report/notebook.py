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

Every string in a result is untrusted (a sidecar or report may come from elsewhere): the markup comes
from the template `notebook.html` alone, autoescaped (templating.py). IPython is imported only when a
notebook already runs it; Jinja2 and the page renderer only when something is drawn.
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
    from vitexport.report import templating

    context = {"export": _export, "verify": _export, "bench": _bench, "package": _package,
               "optimize": _optimize}[kind](result)
    return templating.render("notebook.html", view="result", kind=kind, **context).strip()


# ------------------------------------------------------------------------------------------ values

def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _num(value: Any, spec: str = ".3g") -> str:
    """A number as `spec` writes it; yes/no for a flag; nothing for None; anything else as text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return format(value, spec)
    return str(value)


def _cosine(value: Any) -> str:
    from vitexport.report.page import cosine_words

    return cosine_words(value) if isinstance(value, float) and 0 <= value <= 1 else _num(value, ".6f")


def _duration(seconds: float) -> str:
    return milliseconds(1000 * seconds) if seconds < 1 else f"{seconds:.1f} s"


def _seconds(value: Any) -> str:
    return f"{value:.1f} s" if isinstance(value, (int, float)) and not isinstance(value, bool) else _num(value)


def _table(head: list[str], rows: list[list[str]], caption: str = "") -> dict[str, Any]:
    return {"head": head, "rows": rows, "caption": caption}


def _present(pairs: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    """The (name, value) facts that have a value, each value as text."""
    return [(name, value if isinstance(value, str) else _num(value)) for name, value in pairs
            if value not in (None, "", [], {})]


# ------------------------------------------------------------------------------------ export, verify

TONES = {"verified": "good", "FAILED": "bad", "not-checked-here": "warn"}


def _export(result: dict) -> dict[str, Any]:
    """An export or a verification: its verdict, what was made from what, the parity numbers, each check."""
    parity = _dict(result.get("parity"))
    status = result.get("status")
    status = status if status is not None else "verified" if parity.get("passed") else \
        "not checked" if not parity else "FAILED"
    timings = ", ".join(f"{key.removesuffix('_s')} {_seconds(value)}" for key, value in _dict(result.get("timings"))
                        .items())
    shape = result.get("input_shape")
    facts = _present([
        ("backend", result.get("backend")), ("precision", result.get("precision")),
        ("runs on", result.get("provider")), ("model", result.get("model")),
        ("input", " × ".join(str(s) for s in shape) if isinstance(shape, list) else shape),
        ("artifact", result.get("artifact")), ("sidecar", result.get("sidecar")),
        ("reference", result.get("reference")), ("time", timings)])
    tables = []
    if parity and not parity.get("skipped"):
        tables.append(_table(["max abs error", "mean abs error", "cosine", "top-1", "top-5", "atol", "rtol"], [[
            _num(parity.get("max_abs_error")), _num(parity.get("mean_abs_error")), _cosine(parity.get(
                "cosine_similarity")), _num(parity.get("top1_agreement")), _num(parity.get("top5_agreement")),
            _num(parity.get("atol")), _num(parity.get("rtol"))]], "against PyTorch"))
        checks = [_dict(c) for c in _list(parity.get("checks"))]
        if checks:
            tables.append(_table(["batch", "inputs", "output", "max abs error", "cosine", "top-1", "result"], [[
                _num(c.get("batch")), _num(c.get("feed")), _num(c.get("output")), _num(c.get("max_abs_error")),
                _cosine(c.get("cosine_similarity")), _num(c.get("top1_agreement")),
                "passed" if c.get("passed") else _num(c.get("reason")) or "failed"] for c in checks], "checks"))
    notes = [_num(n) for n in _list(result.get("source_notes"))]
    if parity.get("skipped"):
        notes.append(f"not checked here: {_num(parity['skipped'])}")
    notes += [_num(f) for f in _list(parity.get("failures"))]
    if not parity:
        notes.append("parity: not checked (verify=False)")
    if result.get("artifact_modified"):
        notes.append("the artifact changed since export (its sha256 differs from the sidecar)")
    title = f"vitexport {'verify' if 'artifact_modified' in result else 'export'}: {_num(result.get('backend'))}"
    return {"title": title, "verdict": {"text": _num(status), "tone": TONES.get(status, "plain")},
            "facts_rows": facts, "tables": tables, "notes": notes, "page": None, "page_file": None}


# ------------------------------------------------------------------------------------------- bench

def _bench(report: dict) -> dict[str, Any]:
    """A bench report: its latency table as the Markdown report has it, the files, and the page itself."""
    from vitexport.report import tables
    from vitexport.report.files import html_text

    files = _dict(report.get("files"))
    page_file = Path(str(files["html"])).name if files.get("html") else "bench.html"
    facts = _present([("model", report.get("model")), ("machine", _dict(report.get("fingerprint")).get("cpu")),
                      *[(f"{kind} file", path) for kind, path in files.items()]])
    table = _table(tables.table_columns(report), tables.table_rows(report), "latency per row (ms)")
    notes = [_num(line) for line in tables.unavailable(report)]
    return {"title": f"vitexport bench: {_num(report.get('model'))}", "verdict": None, "facts_rows": facts,
            "tables": [table], "notes": notes, "page": html_text(report, page_file), "page_file": page_file}


# ----------------------------------------------------------------------------------------- package

def _package(result: dict) -> dict[str, Any]:
    """A deploy package: where it is, what it holds, and how to prove it on the device."""
    tolerance = _dict(result.get("tolerance"))
    facts = _present([
        ("package", result.get("package")), ("target", result.get("target")), ("runtime", result.get("runtime")),
        ("backend", result.get("backend")), ("precision", result.get("precision")),
        ("artifact", result.get("artifact")), ("files", result.get("files")),
        ("tolerance", ", ".join(f"{k} {_num(v)}" for k, v in tolerance.items())),
        ("on the device", result.get("check")), ("what it needs there", result.get("install")),
        ("then here", f"vitexport verify --device-report device-report.json --package {_num(result.get('package'))}"
         if result.get("package") else None)])
    cases = [_dict(c) for c in _list(result.get("cases"))]
    tables = [_table(["golden case", "rows", "batch"], [[_num(c.get("name")), _num(c.get("rows")),
                                                         _num(c.get("batch"))] for c in cases])] if cases else []
    return {"title": f"vitexport package: {_num(result.get('target'))}", "verdict": {"text": "packaged",
            "tone": "good"}, "facts_rows": facts, "tables": tables, "notes": [], "page": None, "page_file": None}


# ---------------------------------------------------------------------------------------- optimize

def _optimize(result: dict) -> dict[str, Any]:
    """An optimize run: each candidate's time, speed-up and check, the pick and where it was published."""
    picks = [_dict(p) for p in _list(result.get("picks"))]
    chosen = {p.get("candidate") for p in picks}
    rows = []
    for row in (_dict(r) for r in _list(result.get("candidates"))):
        parity = _dict(row.get("parity"))
        verdict = ("chosen" if row.get("candidate") in chosen else "passed") if row.get("passed") else \
            f"not checked here: {_num(parity['skipped'])}" if parity.get("skipped") else _num(row.get("reason"))
        speedup = row.get("speedup")
        rows.append([_num(row.get("candidate")), _num(row.get("runtime")), _num(row.get("p50_ms")),
                     f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else _num(speedup),
                     _cosine(parity.get("cosine_similarity")), verdict])
    total = _dict(result.get("timings")).get("total_s")
    facts = _present([("target", result.get("target")), ("chosen", result.get("chosen")),
                      ("published", result.get("artifact")), ("time", _seconds(total) if total is not None else None),
                      ("bench report", _dict(result.get("bench")).get("html"))])
    notes = [f"published {_num(p.get('candidate'))} for batch {_num(p.get('batch'))}: {_num(p.get('artifact'))}"
             for p in picks if len(picks) > 1]
    notes += [f"{_num(label)}: not built (it takes minutes; thorough=True builds it)"
              for label in _list(result.get("not_built"))]
    notes += [f"{_num(runtime)} offered nothing: it cannot run here: {_num(why)}"
              for runtime, why in _dict(result.get("runtimes")).items() if why]
    verdict = {"text": f"picked {_num(result.get('chosen'))}", "tone": "good"} if result.get("chosen") else \
        {"text": "nothing passed", "tone": "bad"}
    return {"title": f"vitexport optimize: {_num(result.get('target'))}", "verdict": verdict, "facts_rows": facts,
            "tables": [_table(["candidate", "runtime", "p50 ms", "speed-up", "cosine", "verdict"], rows)],
            "notes": notes, "page": None, "page_file": None}


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

    def drawing(self) -> _Drawing:
        """What the cell shows now."""
        from vitexport.report import templating

        now = self.clock()
        steps = [{"name": name, "time": _duration(seconds)} for name, seconds in self.done]
        current = None
        if self.current is not None:
            c = self.current
            total = c["total"]
            current = {"name": c["name"], "note": c["note"], "total": total,
                       "done": min(c["done"], total) if total is not None else c["done"],
                       "time": _duration(now - c["start"])}
        markup = templating.render("notebook.html", view="progress", steps=steps, current=current).strip()
        lines = [f"✓ {s['name']} {s['time']}" for s in steps]
        if current is not None:
            count = f" {current['done']}/{current['total']}" if current["total"] is not None else ""
            lines.append(f"… {current['name']}{': ' + current['note'] if current['note'] else ''}{count}")
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


def error_line(error: BaseException) -> str:
    """The error as one line: the message (which says the fix) and what its exit code would mean."""
    code = ExitCode(getattr(error, "exit_code", ExitCode.USAGE))
    label = "parity failed" if code == ExitCode.PARITY else "regression" if code == ExitCode.REGRESSION else "error"
    message = " ".join(str(error).split())
    return f"{label}: {message} (exit {int(code)}: {MEANINGS[code]})"


def error_drawing(error: BaseException) -> _Drawing:
    from vitexport.report import templating

    code = ExitCode(getattr(error, "exit_code", ExitCode.USAGE))
    label, _, _ = error_line(error).partition(":")
    markup = templating.render("notebook.html", view="error", label=f"{label}:", message=" ".join(str(error).split()),
                               meaning=f"exit {int(code)}: {MEANINGS[code]}").strip()
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
    if isinstance(result, dict) and isinstance(result.get("parity"), dict):
        _display(Shown(result, "verify" if "artifact_modified" in result else "export"))
    return None


def install_error_display(shell: Any = None) -> bool:
    """In IPython (a notebook's kernel), show vitexport's errors as one line instead of a traceback;
    return whether a shell was there to install into. Calling it again changes nothing."""
    if shell is None:
        if "IPython" not in sys.modules:
            return False
        shell = sys.modules["IPython"].get_ipython()
        if shell is None:
            return False
    shell.set_custom_exc((VitexportError, TypeError), _handler)
    return True
