"""What a notebook shows of the Python API (vitexport.report.notebook), without a kernel: results stay
the plain dicts `--json` prints and draw as tables whose every string is text, the report page
inline for a bench, a progress bar redrawn in place through one display handle, and vitexport's
errors as one line while the user's own keep their traceback. tests/test_notebooks.py runs the
example notebooks in a real kernel."""

from __future__ import annotations

import builtins
import copy
import json
import pickle

import hostile
import pytest
from test_html import Elements, bench_report

from vitexport.core.errors import ParityError, UsageError
from vitexport.core.progress import SILENT
from vitexport.report import notebook
from vitexport.report.notebook import NotebookProgress, Shown, shown

EXPORT = {
    "backend": "onnx", "artifact": "/out/vit.onnx", "sidecar": "/out/vit.onnx.json", "status": "verified",
    "provider": "CPUExecutionProvider", "model": "memory:__main__.TinyViT", "source_notes": ["exported in eval mode"],
    "input_shape": [1, 3, 32, 32], "precision": "fp32", "options": {"opset": 17},
    "parity": {"passed": True, "precision": "fp32", "max_abs_error": 8.3e-07, "mean_abs_error": 1.6e-07,
               "cosine_similarity": 0.9999999999997, "top1_agreement": None, "top5_agreement": 1.0,
               "atol": 0.0001, "rtol": 0.001, "checks": [
                   {"batch": 1, "feed": "random b=1", "output": "logits", "max_abs_error": 8.3e-07,
                    "cosine_similarity": 0.9999999999997, "top1_agreement": None, "passed": True, "reason": None},
                   {"batch": 2, "feed": "random b=2", "output": "logits", "max_abs_error": 3.1,
                    "cosine_similarity": 0.5, "top1_agreement": 0.5, "passed": False,
                    "reason": "max abs error 3.1 > atol"}],
               "failures": []},
    "timings": {"load_s": 2.03, "export_s": 0.87, "verify_s": 0.69},
}
PACKAGE = {
    "package": "/out/vit-onnx-linux", "target": "linux", "backend": "onnx", "artifact": "/out/vit.onnx",
    "precision": "fp32", "runtime": "ONNX Runtime", "manifest_sha256": "5e4f", "files": 13, "check": "python3 check.py",
    "cases": [{"name": "random-0", "rows": 1, "batch": 1}, {"name": "random-1", "rows": 1, "batch": 1}],
    "tolerance": {"atol": 0.0001, "rtol": 0.001, "min_cosine": 0.99999},
    "install": "`pip install onnxruntime numpy`",
}
OPTIMIZE = {
    "target": "cpu", "runtimes": {"onnxruntime": None, "openvino": "no OpenVINO here"}, "not_built": ["executorch-int8"],
    "candidates": [
        {"candidate": "fp32", "runtime": "onnxruntime", "passed": False, "checked": False, "parity": None,
         "p50_ms": 14.9, "speedup": 1.0, "reason": "not checked: slower than the pick"},
        {"candidate": "int8-dynamic", "runtime": "onnxruntime", "passed": True, "checked": True,
         "parity": {"cosine_similarity": 0.99997}, "p50_ms": 4.2, "speedup": 3.54, "reason": None}],
    "chosen": "int8-dynamic", "backend": "onnx", "artifact": "/out/vit-optimized.onnx",
    "picks": [{"batch": 1, "candidate": "int8-dynamic", "p50_ms": 4.2, "artifact": "/out/vit-optimized.onnx"}],
    "bench": {"html": "/out/optimize.html"}, "timings": {"total_s": 23.2},
}


def samples() -> dict[str, dict]:
    bench = bench_report({"onnxruntime-fp32": 9.0, "openvino-int8": 5.0})
    bench["files"] = {"json": "/out/bench-vit.json", "html": "/out/bench-vit.html"}
    verify = {**copy.deepcopy(EXPORT), "artifact_modified": False}
    return {"export": copy.deepcopy(EXPORT), "verify": verify, "bench": bench, "package": copy.deepcopy(PACKAGE),
            "optimize": copy.deepcopy(OPTIMIZE)}


def test_every_kind_has_a_sample():
    assert set(samples()) == set(notebook.KINDS)


# ------------------------------------------------------------------------------------------- results

@pytest.mark.parametrize("kind", notebook.KINDS)
def test_a_shown_result_stays_the_plain_dict(kind):
    result = samples()[kind]
    s = shown(result, kind)
    assert isinstance(s, dict) and s == result and result == s
    assert json.dumps(s, sort_keys=True) == json.dumps(result, sort_keys=True)
    assert json.loads(json.dumps(s)) == result
    again = pickle.loads(pickle.dumps(s))
    assert again == result and again.kind == kind
    assert copy.deepcopy(s) == result and copy.copy(s).kind == kind
    assert type(dict(s)) is dict and repr(s) == repr(result)
    assert shown(s, kind) is s  # wrapping twice changes nothing


def test_a_kind_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="kind should be one of"):
        Shown({}, "matrix")


def parsed(markup: str) -> list[tuple[str, dict]]:
    return Elements(markup).found


def test_an_export_shows_its_verdict_facts_and_each_check():
    markup = shown(samples()["export"], "export")._repr_html_()
    assert "vitexport export: onnx" in markup and ">verified</b>" in markup
    for text in ("/out/vit.onnx", "1 × 3 × 32 × 32", "CPUExecutionProvider", "exported in eval mode",
                 "random b=2", "max abs error 3.1 &gt; atol", "load 2.0 s"):
        assert text in markup, text
    assert "1 − 3e-13" in markup  # a cosine in the digits that tell it from 1
    assert "vitexport verify: onnx" in shown(samples()["verify"], "verify")._repr_html_()


@pytest.mark.parametrize("kind", ["export", "verify"])
def test_a_model_that_does_not_classify_shows_its_tasks_numbers_and_gates(kind):
    """A depth model's display has no top-1 or top-5 column: its own numbers, each with the gate that
    judged it, and why a number is n/d."""
    result = samples()[kind]
    result["parity"].update(task="depth", precision="fp16", task_metrics={"abs_rel": 0.0021, "delta1": None},
                            task_judged_on=["abs_rel"], task_not_given={"delta1": "PyTorch's depth is zero everywhere"})
    for check in result["parity"]["checks"]:
        check["output"] = "depth"
    markup = shown(result, kind)._repr_html_()
    assert "top-1" not in markup and "top-5" not in markup
    for text in ("depth: in the task&#39;s terms", "abs rel", "0.0021", "&lt;= 0.01", "n/d",
                 "PyTorch&#39;s depth is zero everywhere"):
        assert text in markup, text
    assert "top-1" in shown(samples()[kind], kind)._repr_html_()  # a classifier keeps its columns


def test_an_artifact_not_checked_here_says_why_instead_of_numbers():
    result = {**samples()["export"], "status": "not-checked-here",
              "parity": {"skipped": "the Core ML evaluator lacks op foo", "checks": []}}
    markup = shown(result, "export")._repr_html_()
    assert "not-checked-here" in markup and "not checked here: the Core ML evaluator lacks op foo" in markup
    assert "max abs error" not in markup


def test_a_bench_shows_its_latency_table_and_its_page_inline():
    report = samples()["bench"]
    elements = parsed(shown(report, "bench")._repr_html_())
    frames = [attrs for tag, attrs in elements if tag == "iframe"]
    assert len(frames) == 1 and frames[0]["sandbox"] == "allow-scripts"
    inner = frames[0]["srcdoc"]  # the parser has undone the attribute's escaping: the page as written to disk
    from vitexport.report.files import html_text

    assert inner == html_text(report, "bench-vit.html")
    assert "p50 ms" in shown(report, "bench")._repr_html_() and "openvino" in inner


def test_a_package_and_an_optimize_run_say_what_they_made():
    package = shown(samples()["package"], "package")._repr_html_()
    for text in ("/out/vit-onnx-linux", "python3 check.py", "random-1",
                 "vitexport verify --device-report device-report.json --package /out/vit-onnx-linux"):
        assert text in package, text
    assert "judged as" not in package  # a classifier: its tolerance says it all
    depth = {**samples()["package"], "task": "depth", "task_gates": [["abs_rel", "max", 0.01], ["delta1", "min", 0.99]]}
    assert "depth: abs rel &lt;= 0.01, delta1 &gt;= 0.99" in shown(depth, "package")._repr_html_()
    optimize = shown(samples()["optimize"], "optimize")._repr_html_()
    for text in ("picked int8-dynamic", "3.54x", "chosen", "not checked: slower than the pick",
                 "openvino offered nothing: it cannot run here: no OpenVINO here", "executorch-int8: not built"):
        assert text in optimize, text


@pytest.mark.parametrize("kind", notebook.KINDS)
def test_no_string_of_a_result_becomes_markup(kind):
    """Every field replaced by markup that would act were it printed as markup: it stays text, in the
    notebook's output and in the page a bench embeds."""
    def draw(results):
        return Shown(results[0], kind)._repr_html_()

    results, kept = hostile.make_hostile([samples()[kind]], draw)
    assert kept
    markup = draw(results)
    assert hostile.MARK in markup  # the payloads are there, as text
    elements = parsed(markup)
    tags = [tag for tag, _ in elements]
    assert not {"img", "script", "object", "embed", "link", "svg", "style"} & set(tags)
    assert tags.count("iframe") == (kind == "bench") and not [t for t in tags if t.startswith("pwned")]
    assert not [(tag, name) for tag, attrs in elements for name in attrs if name.startswith("on") or
                name == "data-pwned"]
    for tag, attrs in elements:
        if tag == "iframe":  # the page itself: its own script only, every field text
            inner = parsed(attrs["srcdoc"])
            inner_tags = [t for t, _ in inner]
            assert inner_tags.count("script") == 1 and not {"img", "iframe", "object", "embed"} & set(inner_tags)
            assert not [t for t in inner_tags if t.startswith("pwned")]
            assert {(t, n) for t, a in inner for n in a if n.startswith("on") or n == "data-pwned"} <= \
                {("form", "onsubmit")}


# ------------------------------------------------------------------------------------------ IPython

@pytest.fixture
def shell(tmp_path, monkeypatch):
    """A plain IPython shell (no kernel), its history off, removed afterwards with what it added."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    added = {"__IPYTHON__", "display"} - set(vars(builtins))
    made = InteractiveShell.instance(config=config)
    yield made
    made.set_custom_exc((), None)
    InteractiveShell.clear_instance()
    for name in added:
        vars(builtins).pop(name, None)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bar_is_drawn_once_and_redrawn_in_place(shell):
    from IPython.utils.capture import capture_output

    clock = Clock()
    bar = NotebookProgress(interval=0.0, clock=clock)
    with capture_output() as captured:
        bar.step("exporting")
        clock.now += 2.5
        bar.step("checking <b>against</b> PyTorch", total=3)
        bar.advance()
        bar.note("random b=1")
        bar.advance(5)  # more than the total: the bar stays full, not past it
        bar.close()
    outputs = captured.outputs
    ids = {o.transient["display_id"] for o in outputs}
    assert len(outputs) == 6 and len(ids) == 1
    assert [o.update for o in outputs] == [False] + [True] * 5
    middle = outputs[3].data["text/html"]
    assert '<progress value="1" max="3"' in middle and "checking &lt;b&gt;against&lt;/b&gt; PyTorch: random b=1" \
        in middle and "exporting <span" in middle and "2.5 s" in middle
    last = outputs[-1]
    assert last.data["text/html"].count("✓") == 2 and "…" not in last.data["text/html"]
    assert last.data["text/plain"].splitlines() == ["✓ exporting 2.5 s", "✓ checking <b>against</b> PyTorch 0 ms"]
    assert not any("\x1b" in text for o in outputs for text in o.data.values())
    assert captured.stdout == "" and captured.stderr == ""


def test_the_bar_redraws_a_note_at_most_every_interval_but_a_step_at_once(shell):
    from IPython.utils.capture import capture_output

    clock = Clock()
    bar = NotebookProgress(interval=1.0, clock=clock)
    with capture_output() as captured:
        bar.step("calibrating", total=100)
        for _ in range(50):
            bar.advance()
        clock.now += 1.0
        bar.advance()  # a second later: drawn
        bar.step("checking")
    assert len(captured.outputs) == 3
    assert 'value="51"' in captured.outputs[1].data["text/html"]


def test_a_call_that_fails_leaves_its_step_stopped_not_done(shell, monkeypatch):
    """The API's wrapper: a bar of its own in a kernel, closed when the call ends, its step marked
    stopped when the call raised; a reporter the caller gave is passed on untouched."""
    import IPython
    from IPython.utils.capture import capture_output

    class Kernel:
        kernel = object()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Kernel())
    with capture_output() as captured, pytest.raises(UsageError):
        with notebook.api_call() as bar:
            bar.step("exporting")
            bar.step("checking against PyTorch", total=2)
            raise UsageError("bad input")
    last = captured.outputs[-1].data
    assert last["text/plain"].splitlines()[-1] == "✗ checking against PyTorch 0/2 (stopped)"
    assert "✗" in last["text/html"] and "stopped" in last["text/html"]

    with capture_output() as captured:
        with notebook.api_call() as bar:
            bar.step("exporting")
    assert captured.outputs[-1].data["text/plain"].startswith("✓ exporting")

    given = NotebookProgress()
    with notebook.api_call(given) as passed:
        assert passed is given  # the caller's, as given
    assert given.handle is None  # and left for the caller to draw and close


def test_the_api_draws_a_bar_only_in_a_kernel(shell, monkeypatch):
    import IPython

    assert notebook.progress_for_api() is SILENT  # IPython, but no kernel behind it

    class Kernel:
        kernel = object()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Kernel())
    assert isinstance(notebook.progress_for_api(), NotebookProgress)


def run(shell, code: str):
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        outcome = shell.run_cell(code)
    return outcome, captured


def test_a_vitexport_error_shows_as_one_line_with_its_exit_code(shell):
    assert notebook.install_error_display(shell)
    outcome, captured = run(shell, "from vitexport.core.errors import UsageError\n"
                                   "raise UsageError('unknown preset \"<b>x</b>\": pick one of tiny, small')")
    assert isinstance(outcome.error_in_exec, UsageError)  # the cell still failed: "run all" stops there
    assert "Traceback" not in captured.stdout + captured.stderr
    [shown_error] = captured.outputs
    assert shown_error.data["text/plain"] == \
        'error: unknown preset "<b>x</b>": pick one of tiny, small (exit 2: bad usage or bad input)'
    markup = shown_error.data["text/html"]
    assert "&lt;b&gt;x&lt;/b&gt;" in markup and "<b>x</b>" not in markup
    assert [tag for tag, _ in parsed(markup)] == ["div", "b", "span"] and "\n" not in markup


def test_the_apis_own_type_error_is_one_line_and_the_users_keeps_its_traceback(shell):
    notebook.install_error_display(shell)
    _, captured = run(shell, "from vitexport import api\napi.verify(42)")
    [line] = [o.data["text/plain"] for o in captured.outputs]
    assert line.startswith("error: api.verify: artifact should be") and line.endswith("(exit 2: bad usage or bad input)")
    assert "Traceback" not in captured.stdout

    # The user's own TypeError, even one whose words look like the API's, keeps its traceback.
    outcome, captured = run(shell, "def forward(x):\n    raise TypeError('api.mine: not vitexport')\nforward(1)")
    assert isinstance(outcome.error_in_exec, TypeError) and not captured.outputs
    assert "forward" in captured.stdout and "not vitexport" in captured.stdout


def test_a_parity_failure_shows_its_line_and_its_checks(shell):
    notebook.install_error_display(shell)
    shell.user_ns["failed"] = ParityError("onnx: max abs error 3.1 > atol 1e-4 at batch 2", {**EXPORT, "status": "FAILED"})
    _, captured = run(shell, "raise failed")
    line, table = captured.outputs
    assert line.data["text/plain"] == "parity failed: onnx: max abs error 3.1 > atol 1e-4 at batch 2 (exit 4: parity " \
                                      "failed, or the artifact is damaged or changed)"
    assert ">FAILED</b>" in table.data["text/html"] and "random b=2" in table.data["text/html"]


def test_a_regression_shows_the_report_that_failed_its_baseline(shell):
    from vitexport.core.errors import RegressionError

    notebook.install_error_display(shell)
    shell.user_ns["slower"] = RegressionError("onnxruntime b1 is 20% slower than the baseline", samples()["bench"])
    _, captured = run(shell, "raise slower")
    line, table = captured.outputs
    assert line.data["text/plain"].startswith("regression: onnxruntime b1 is 20% slower") and \
        line.data["text/plain"].endswith("(exit 5: worse than the baseline beyond its margin)")
    assert "vitexport bench:" in table.data["text/html"]


def test_outside_ipython_nothing_is_installed():
    assert notebook.install_error_display() is False and not notebook.in_kernel()
