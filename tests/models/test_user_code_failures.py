"""Users' own code failing in every way Python allows (an exception with or without a message, of any
type, `sys.exit` with any code, KeyboardInterrupt, writing its reason to stderr first, crashing the
interpreter with a signal), while it is imported, while its factory runs or in its forward pass: each
ends with a documented exit code and a line that names the cause (the type and message, or the exit,
the user's file and line, and what it wrote when it said nothing else), never vitexport's own exit.

The in-process part is fuzzed by Hypothesis (FUZZ_EXAMPLES; `VITEXPORT_FUZZ_EXAMPLES=N` tries N with a
random seed); the crashes and the held-back stderr need a process of their own each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from user_model import user_model
from vitexport.cli.app import app

FUZZ_EXAMPLES = int(os.environ.get("VITEXPORT_FUZZ_EXAMPLES", "0"))
SETTINGS = settings(max_examples=FUZZ_EXAMPLES or 25, deadline=None, database=None, derandomize=not FUZZ_EXAMPLES,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

EXCEPTIONS = ["RuntimeError", "ValueError", "KeyError", "AssertionError", "OSError", "ZeroDivisionError",
              "NotImplementedError", "Exception", "KeyboardInterrupt", "SystemExit"]
EXIT_CODES = [None, 0, 1, 2, 3, 127, 255, "usage: make [-h] --size N"]
# Messages of any code point (lone surrogates and markup included), or none.
MESSAGES = st.one_of(st.just(""), st.text(alphabet=st.characters(exclude_categories=()), max_size=30),
                     st.sampled_from(["[red]x[/red]", "line one\nline two", "   ", "\x1b[2J"]))


@st.composite
def failures(draw):
    place = draw(st.sampled_from(["top", "factory", "forward"]))
    said = draw(st.lists(st.text(alphabet="abcdefgh: /.-", min_size=1, max_size=20), max_size=3))
    if draw(st.booleans()):
        code = draw(st.sampled_from(EXIT_CODES))
        how = f"sys.exit({code!r})"
        cause = f"called sys.exit({code!r})"
    else:
        kind = draw(st.sampled_from(EXCEPTIONS))
        message = draw(MESSAGES)
        how = f"raise {kind}({message!r})" if message else f"raise {kind}"
        cause = f"called sys.exit({message!r})" if kind == "SystemExit" and message else \
            "called sys.exit(None)" if kind == "SystemExit" else f"failed: {kind}"
    prints = "; ".join(f"print({line!r}, file=sys.stderr)" for line in said)
    body = f"{prints}; {how}" if prints else how
    return place, body, cause


def invoke(path: Path):
    from vitexport.core.termination import signals_raise

    with signals_raise():  # as `main` runs every command: a KeyboardInterrupt not signalled is the code's own
        return CliRunner().invoke(app, ["torchscript", "--model", f"{path}:make", "--out",
                                        str(path.parent / f"out-{path.stem}"), "--quiet", "--no-verify"])


def test_users_code_failing_any_way_is_an_error_naming_it(tmp_path):
    count = iter(range(10**9))

    @SETTINGS
    @given(failures())
    def check(failure):
        place, body, cause = failure
        source = user_model(top=body if place == "top" else "", factory=body if place == "factory" else "pass",
                              forward=body if place == "forward" else "pass")
        path = tmp_path / f"model{next(count)}.py"  # a fresh module each time
        path.write_text(source, encoding="utf-8")
        result = invoke(path)
        lines = [line for line in result.stderr.splitlines() if line.strip()]  # in-process, its prints come first
        assert result.exit_code == 2, (body, result.exit_code, result.stderr, repr(result.exception))
        assert lines[-1].startswith("error:") and sum(line.startswith("error:") for line in lines) == 1, lines
        assert cause in lines[-1] and f"{path}:" in lines[-1], (body, lines[-1])  # what, and the user's file and line
        assert "internal error" not in result.stderr

    check()


def vitexport(args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                       os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "vitexport", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


# (what the factory does, the exit code, what the last lines must say)
CRASHES = [
    ("print('weights not found at /models/w.pt', file=sys.stderr); raise RuntimeError()", 2,
     ["factory model.py:make failed: RuntimeError (with no message) at", "model.py:", "weights not found at /models/w.pt"]),
    ("print('usage: make [-h] --size N', file=sys.stderr); print('make: error: --size is required', file=sys.stderr); "
     "sys.exit(2)", 2, ["factory model.py:make called sys.exit(2) at", "usage: make [-h] --size N",
                        "make: error: --size is required"]),
    ("import ctypes; ctypes.string_at(0)", -signal.SIGSEGV, ["Fatal Python error: Segmentation fault", "model.py"]),
    ("os.abort()", -signal.SIGABRT, ["Fatal Python error: Aborted", "model.py"]),
    ("os.kill(os.getpid(), signal.SIGTERM); import time; time.sleep(5)", 128 + signal.SIGTERM,
     ["interrupted by SIGTERM"]),
]


@pytest.mark.parametrize("body, code, said", CRASHES, ids=["stderr-then-bare", "argparse-exit", "segfault", "abort",
                                                           "sigterm"])
def test_a_factory_crashing_ends_with_a_documented_code_and_its_cause(tmp_path, body, code, said):
    """A crash by a signal cannot be caught: the process ends 128 + N (a shell's `$?`; -N here), and the
    report of the crash still reaches the terminal with the user's frame, though library output is held."""
    (tmp_path / "model.py").write_text(user_model(top="", factory=body, forward="pass"), encoding="utf-8")
    run = vitexport(["torchscript", "--model", "model.py:make", "--out", "out", "--quiet"], tmp_path)
    assert run.returncode == code, (run.returncode, run.stderr[-3000:])
    assert all(text in run.stderr for text in said), run.stderr[-3000:]
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.pt"))


@pytest.mark.parametrize("body, code, said", [
    ("sys.exit(3)", 1, "called sys.exit(3) at"),
    ("raise KeyboardInterrupt", 1, "failed: KeyboardInterrupt (with no message) at"),
    ("raise RuntimeError", 1, "TorchScript trace failed: RuntimeError: (no message) (raised at"),
])
def test_a_forward_pass_failing_only_while_traced_is_named_too(tmp_path, body, code, said):
    """Past the first forward, the exporter traces the model: what it raises there is named, with its frame."""
    forward = f"if torch.jit.is_tracing(): {body}"
    path = tmp_path / "traced.py"
    path.write_text(user_model(top="", factory="pass", forward=forward), encoding="utf-8")
    result = invoke(path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert lines[-1].startswith("error:") and said in lines[-1] and f"{path}:" in lines[-1], lines
