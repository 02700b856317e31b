"""What a notebook shows of each kind of API result, as plain data for the template `notebook.html`
(report/notebook.py draws it): an export or verification as its verdict, facts, parity numbers and
checks; a bench report as its latency table (the Markdown report's columns), its files and its page;
a deploy package as what it holds and how to check it on the device; an optimize run as its
candidates and pick.

Nothing here writes markup. Every value becomes text (numbers formatted, anything else `str()`), and
a result of the wrong shape (a hostile sidecar, a field of another type) is shown as it is rather
than breaking the display.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vitexport.report.tasks import classifies


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


def export(result: dict) -> dict[str, Any]:
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
        # top-1 and top-5 are a classifier's numbers: a depth map, a mask or boxes show their task's instead
        ranks = classifies(parity)
        top = ["top-1", "top-5"] if ranks else []
        tables.append(_table(["max abs error", "mean abs error", "cosine", *top, "atol", "rtol"], [[
            _num(parity.get("max_abs_error")), _num(parity.get("mean_abs_error")), _cosine(parity.get(
                "cosine_similarity")), *([_num(parity.get("top1_agreement")), _num(parity.get("top5_agreement"))]
                                         if ranks else []),
            _num(parity.get("atol")), _num(parity.get("rtol"))]], "against PyTorch"))
        if not ranks:
            tables.append(_task_table(parity))
        checks = [_dict(c) for c in _list(parity.get("checks"))]
        if checks:
            tables.append(_table(["batch", "inputs", "output", "max abs error", "cosine", *top[:1], "result"], [[
                _num(c.get("batch")), _num(c.get("feed")), _num(c.get("output")), _num(c.get("max_abs_error")),
                _cosine(c.get("cosine_similarity")), *([_num(c.get("top1_agreement"))] if ranks else []),
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


def _task_table(parity: dict) -> dict[str, Any]:
    """The task's own numbers (worst over the inputs), each with the gate that judged it, or why it is n/d."""
    from vitexport.verify.tasks import applied_gates

    numbers = {k: v for k, v in _dict(parity.get("task_metrics")).items() if isinstance(k, str)}
    try:
        gates = {name: f"{'>=' if kind == 'min' else '<='} {limit:g}" for name, kind, limit in applied_gates(
            str(parity.get("task")), str(parity.get("precision", "fp32")), numbers, _dict(parity.get("task_gates")))}
    except (TypeError, ValueError):  # a hand-edited report's numbers: shown as they are, no gate claimed
        gates = {}
    why = _dict(parity.get("task_not_given"))
    rows = [[name.replace("_", " "), "n/d" if value is None else _num(value, ".4g"),
             gates.get(name, "") if value is not None else _num(why.get(name))] for name, value in numbers.items()]
    return _table(["number", "value", "gate"], rows or [["no output it reads", "", ""]],
                  f"{_num(parity.get('task'))}: in the task's terms")


# ------------------------------------------------------------------------------------------- bench

def bench(report: dict) -> dict[str, Any]:
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

def package(result: dict) -> dict[str, Any]:
    """A deploy package: where it is, what it holds, and how to prove it on the device."""
    from vitexport.report.tasks import gates_words

    tolerance = _dict(result.get("tolerance"))
    facts = _present([
        ("package", result.get("package")), ("target", result.get("target")), ("runtime", result.get("runtime")),
        ("backend", result.get("backend")), ("precision", result.get("precision")),
        ("artifact", result.get("artifact")), ("files", result.get("files")),
        ("tolerance", ", ".join(f"{k} {_num(v)}" for k, v in tolerance.items())),
        ("judged as", gates_words(str(result["task"]), _list(result.get("task_gates"))) if result.get("task") else None),
        ("on the device", result.get("check")), ("what it needs there", result.get("install")),
        ("then here", f"vitexport verify --device-report device-report.json --package {_num(result.get('package'))}"
         if result.get("package") else None)])
    cases = [_dict(c) for c in _list(result.get("cases"))]
    tables = [_table(["golden case", "rows", "batch"], [[_num(c.get("name")), _num(c.get("rows")),
                                                         _num(c.get("batch"))] for c in cases])] if cases else []
    return {"title": f"vitexport package: {_num(result.get('target'))}", "verdict": {"text": "packaged",
            "tone": "good"}, "facts_rows": facts, "tables": tables, "notes": [], "page": None, "page_file": None}


# ---------------------------------------------------------------------------------------- optimize

def optimize(result: dict) -> dict[str, Any]:
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
