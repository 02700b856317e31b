"""Progress: the library's protocol (steps, counts, notes), what the CLI draws with it (bars on a
terminal, "… step" lines in a log, nothing with --json or --quiet), and where long steps report."""

import io
import json
import os
import pty
import select
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from vitexport import api
from vitexport.bench import session as benchsession
from vitexport.cli.app import app
from vitexport.cli.progressbar import Bars, reporter
from vitexport.core.progress import SILENT, Lines, Progress, as_progress, current, using
from vitexport.models.sources import SourceSpec

runner = CliRunner()
TINY = ["--config", "tiny", "--set", "depth=1"]


class Recorder(Progress):
    """Keeps every call, to check what the library reports."""

    def __init__(self):
        self.calls = []

    def step(self, name, total=None):
        self.calls.append(("step", name, total))

    def note(self, text):
        self.calls.append(("note", text))

    def advance(self, n=1):
        self.calls.append(("advance", n))

    def steps(self):
        return [(c[1], c[2]) for c in self.calls if c[0] == "step"]

    def advances_after(self, name):
        start = next(i for i, c in enumerate(self.calls) if c[:2] == ("step", name))
        end = next((i for i, c in enumerate(self.calls) if c[0] == "step" and i > start), len(self.calls))
        return sum(c[1] for c in self.calls[start:end] if c[0] == "advance")


def test_lines_print_steps_and_notes():
    out = []
    lines = Lines(out.append)
    lines.step("timing", total=2)
    lines.note("torch at batch 1")
    lines.advance()
    lines("a plain message")  # the one-argument callback of earlier versions
    assert out == ["timing", "timing: torch at batch 1", "a plain message"]


def test_what_callers_pass_becomes_a_progress():
    out = []
    assert as_progress(None) is SILENT
    assert isinstance(as_progress(out.append), Lines)
    recorder = Recorder()
    assert as_progress(recorder) is recorder
    with pytest.raises(TypeError):
        as_progress(3)
    assert current() is SILENT
    with using(recorder):
        with using(out.append) as inner:
            assert current() is inner
        assert current() is recorder
    assert current() is SILENT


@pytest.mark.parametrize("quiet,machine,tty,kind", [(True, False, True, "silent"), (False, True, True, "silent"),
                                                    (False, False, False, "lines"), (False, False, True, "bars")])
def test_the_cli_picks_bars_only_for_a_terminal(quiet, machine, tty, kind):
    class Stream(io.StringIO):
        def isatty(self):
            return tty

    with reporter(quiet=quiet, machine_output=machine, stream=Stream()) as progress:
        got = "silent" if progress is SILENT else "lines" if isinstance(progress, Lines) else \
            "bars" if isinstance(progress, Bars) else type(progress).__name__
    assert got == kind


def test_bars_draw_counted_steps_with_count_and_eta():
    from rich.console import Console

    stream = io.StringIO()
    bars = Bars(Console(file=stream, force_terminal=True, width=120))
    bars.step("loading tiny")
    bars.step("timing", total=3)
    bars.note("torch at batch [1]")  # brackets are text, not rich markup
    bars.bars.refresh()
    bars.advance(3)
    bars.close()
    text = stream.getvalue()
    assert "loading tiny" in text and "timing" in text and "3/3" in text and "━" in text and "✓" in text
    assert "torch at batch [1]" in text
    assert all(task.finished for task in bars.bars.tasks)


def test_an_export_reports_a_counted_check(tmp_path):
    recorder = Recorder()
    api.export("torchscript", SourceSpec("tiny", overrides={"depth": 1}), out_dir=tmp_path, progress=recorder)
    steps = [name for name, _ in recorder.steps()]
    assert steps == ["loading tiny", "exporting tiny-depth1 to torchscript", "checking against PyTorch"]
    total = dict(recorder.steps())["checking against PyTorch"]
    assert total == 2 and recorder.advances_after("checking against PyTorch") == total  # batch 1 + determinism
    assert ("note", "determinism") in recorder.calls


def test_bench_rounds_are_one_counted_step(monkeypatch, tmp_path):
    from fake_workers import install

    install(monkeypatch)  # workers that answer at once with made-up timings
    recorder = Recorder()
    api.bench(SourceSpec("tiny", overrides={"depth": 1}), ["torch", "torch-cuda"], [1, 2], roofline=False,
              budget_s=2.0, out_dir=tmp_path, progress=recorder)
    import torch

    cells = 4 if torch.cuda.is_available() else 2  # cells that can run here get a worker; the rest say why not
    assert ("starting workers", cells + 1) in recorder.steps()  # and one for the reference kernel
    assert ("note", "open: torch (fp32) at batch 2") in recorder.calls
    rounds = benchsession.MIN_ROUNDS  # 2 s of bursts of about 0.25 s
    assert ("timing", rounds) in recorder.steps() and recorder.advances_after("timing") == rounds
    assert ("note", f"round {rounds}/{rounds}") in recorder.calls


def test_qdq_calibration_reports_each_input(tmp_path):
    import numpy as np

    from vitexport.backends.onnx_common.quantize import to_qdq_int8

    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), out_dir=tmp_path, verify=False)
    recorder = Recorder()
    calibration = np.random.default_rng(0).standard_normal((3, 3, 224, 224)).astype(np.float32)
    with using(recorder):
        to_qdq_int8(result["artifact"], tmp_path / "q.onnx", "pixel_values", calibration)
    assert ("calibrating int8 (QDQ)", 3) in recorder.steps()
    assert recorder.advances_after("calibrating int8 (QDQ)") == 3


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("art")
    assert runner.invoke(app, ["torchscript", *TINY, "--out", str(out), "--quiet"]).exit_code == 0
    return str(out / "tiny-depth1.pt")


def test_no_progress_with_json_or_quiet_and_lines_when_not_a_terminal(artifact):
    as_json = runner.invoke(app, ["verify", artifact, "--json"])
    assert as_json.exit_code == 0 and "…" not in as_json.stderr
    json.loads(as_json.stdout)
    quiet = runner.invoke(app, ["verify", artifact, "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    logged = runner.invoke(app, ["verify", artifact])  # stderr is not a terminal here
    assert logged.exit_code == 0
    assert "… rebuilding tiny" in logged.stderr and "… checking against PyTorch: random b=1 (1/1)" in logged.stderr
    assert "\x1b[" not in logged.stderr and "━" not in logged.stderr  # no bars, no cursor movement


def test_a_terminal_gets_bars_and_stdout_stays_clean(artifact):
    """The real CLI with stderr on a pseudo-terminal: bars there, the result alone on stdout."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "vitexport", "verify", artifact], stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    drawn = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    stdout = proc.stdout.read().decode()
    assert proc.wait(timeout=120) == 0
    os.close(master)
    text = drawn.decode(errors="replace")
    assert "checking against PyTorch" in text and "━" in text and "✓" in text
    assert "PASSED" in stdout and "━" not in stdout and "checking against PyTorch" not in stdout
