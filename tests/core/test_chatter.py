"""Libraries' output held back: nothing of it on success, and on a failure the lines that may explain
it (the last ones, and earlier ones naming an op, a file or an error) with a line pointing to --verbose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vitexport.core.chatter import SHOWN_EARLIER, SHOWN_LAST, relevant

ROOT = Path(__file__).resolve().parents[2]


def test_relevant_keeps_the_last_lines_and_earlier_ones_that_name_a_cause():
    lines = [f"progress {i}%" for i in range(100)]
    lines[10] = "No conversion rule found for operations: aten::FloatImplicit"
    lines[20] = "[onnx_export.cpp:151] while exporting"
    picked = relevant(lines)
    assert picked == [lines[10], lines[20], *lines[-SHOWN_LAST:]]
    many = [f"error {i}" for i in range(100)]
    assert relevant(many) == many[-(SHOWN_LAST + SHOWN_EARLIER):]
    assert relevant(["x" * 1000, "x" * 1000, "y"]) == ["x" * 299 + "…", "y"]


SCRIPT = """
import os, sys
from vitexport.core import chatter, errors

def work(outcome):
    for i in range(40):
        print(f"library: step {{i}}", file=sys.stderr)
    os.write(2, b"[convert.cpp:151] No conversion rule found for operations: aten::FloatImplicit\\n")
    for i in range(3):
        print(f"library: unwinding {{i}}", file=sys.stderr)
    if outcome == "export-error":
        raise errors.ExportError("openvino.convert_model failed")
    if outcome == "bad-input":
        raise errors.UsageError("--out x: a file")
    if outcome == "bug":
        raise RuntimeError("a bug")

outcome = sys.argv[1]
try:
    with chatter.held_back(verbose=outcome == "verbose"):
        work(outcome)
except Exception as e:
    print(f"error: {{e}}", file=sys.stderr)
"""


def held(outcome: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("VITEXPORT_VERBOSE", None)
    run = subprocess.run([sys.executable, "-c", SCRIPT.format(), outcome], capture_output=True, text=True, env=env,
                         timeout=60)
    return run.stderr


@pytest.mark.parametrize("outcome", ["export-error", "bug"])
def test_a_failure_shows_the_lines_that_explain_it_and_points_to_verbose(outcome):
    text = held(outcome)
    lines = text.splitlines()
    assert lines[0].startswith("--- what libraries wrote to stderr before the failure (") and "--verbose shows all" \
        in lines[0]
    assert "No conversion rule found for operations: aten::FloatImplicit" in text
    assert "library: unwinding 2" in text and "library: step 3\n" not in text  # trimmed
    assert lines[-1].startswith("error: ")


@pytest.mark.parametrize("outcome", ["ok", "bad-input"])
def test_a_success_or_a_refusal_of_the_users_input_shows_none_of_it(outcome):
    text = held(outcome)
    assert "library:" not in text and "conversion" not in text


def test_verbose_shows_all_of_it():
    text = held("verbose")
    assert "library: step 0" in text and "library: step 39" in text and "aten::FloatImplicit" in text
