"""The example notebooks (notebooks/*.ipynb) run, top to bottom, in a real Jupyter kernel as a user
runs them: a ViT defined and trained in cells, exported from memory to every backend available,
verified again in a fresh process, packaged and timed. They are kept in git without outputs. The
notebook display of results, progress and errors is checked in a kernel here too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kernels import execute, texts, use_this_interpreter

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks_in_different_styles():
    assert len(NOTEBOOKS) >= 2
    sources = ["\n".join(c.source for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code")
               for p in NOTEBOOKS]
    assert any("nn.MultiheadAttention" in s or "einops" in s for s in sources)
    assert any("softmax" in s and "MultiheadAttention" not in s for s in sources)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_kept_without_outputs(path):
    """Outputs hold paths, timings and the machine's name: they are made by running, not committed."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = [i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and
             (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} keep outputs; clear them before committing " \
                      "(Jupyter: Clear Outputs of All Cells)"
    assert "widgets" not in notebook.metadata


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_runs_in_a_kernel(path, tmp_path, monkeypatch):
    kernel = use_this_interpreter(tmp_path / "jupyter", monkeypatch)
    notebook = execute(nbformat.read(path, as_version=4), tmp_path, kernel)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    html = "\n".join(h for c in code for h in texts(c, "text/html"))
    # Every backend exported from memory and verified, each shown as HTML; packaged; the bench page inline.
    for backend in ("onnx", "openvino", "torchscript", "coreml", "executorch"):
        assert f"vitexport export: {backend}" in html, backend
    assert html.count(">verified</b>") >= 5 and "vitexport package: linux" in html
    assert "vitexport bench:" in html and "<iframe" in html
    # Verified again in fresh processes, where the class does not exist; a changed artifact fails (exit 4).
    said = "\n".join(t for c in code for t in texts(c))
    verdicts = re.findall(r"^(\S+): (verified in a fresh process \(exit 0\).*|exit \d+: .*)$", said, re.M)
    passed = [name for name, verdict in verdicts if verdict.startswith("verified")]
    failed = [(name, verdict) for name, verdict in verdicts if not verdict.startswith("verified")]
    assert len(passed) >= (5 if "handwritten" in path.name else 1), verdicts
    assert failed == ([("vit-torchscript.pt", failed[0][1])] if "handwritten" in path.name else []), failed
    assert not failed or failed[0][1].startswith("exit 4: parity failed: vit-torchscript.pt is corrupt or changed")
    # What the notebook shows has no traceback, and no terminal codes but the colours Jupyter draws.
    shown = [t for c in code for o in c.outputs if o.output_type in ("display_data", "execute_result")
             for t in o.data.values() if isinstance(t, str)]
    assert not [t for t in shown if "\x1b[" in t] and "Traceback" not in said
    assert not re.search(r"\x1b\[\d*[ABCDEFGHJK]|\r(?!\n)", said), "a bar drawn with terminal codes"


def test_results_progress_and_errors_display_in_a_kernel(tmp_path, monkeypatch):
    """In a real kernel: the bar is one output redrawn in place, a vitexport error one line (no
    traceback), the user's own error its usual traceback, libraries' stderr held back."""
    kernel = use_this_interpreter(tmp_path / "jupyter", monkeypatch)
    cells = [
        "from vitexport.report import notebook\n"
        "assert notebook.install_error_display() and notebook.in_kernel()\n"
        "bar = notebook.progress_for_api()\n"
        "bar.step('exporting')\n"
        "bar.step('checking', total=2)\n"
        "bar.advance(2)\n"
        "bar.close()\n"
        "type(bar).__name__",
        "from vitexport.core.errors import UsageError\n"
        "raise UsageError('unknown preset \"nope\": pick one of tiny, small')",
        "notebook.shown({'backend': 'onnx', 'artifact': 'a.onnx', 'status': 'verified'}, 'export')",
        "from vitexport import api\napi.verify(42)",
        "def forward(x):\n    raise ValueError('the model says no')\nforward(1)",
        "import os, sys, warnings\n"
        "with notebook.held_back():\n"
        "    os.write(2, b'a C++ log line\\n')\n"
        "    print('a progress bar', file=sys.stderr)\n"
        "    warnings.warn('a deprecation')\n"
        "    print('the notebook says')\n"
        "print('and after', file=sys.stderr)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    bar, error, result, wrong, own, chatter = execute(notebook, tmp_path, kernel, cell_timeout=120, allow_errors=True).cells

    [drawn] = [o for o in bar.outputs if o.output_type == "display_data"]  # one output, updated in place
    assert drawn.data["text/plain"].splitlines()[0].startswith("✓ exporting")
    assert drawn.data["text/html"].count("✓") == 2 and texts(bar)[-1] == "'NotebookProgress'"

    assert [o.output_type for o in error.outputs] == ["display_data"]
    assert error.outputs[0].data["text/plain"] == \
        'error: unknown preset "nope": pick one of tiny, small (exit 2: bad usage or bad input)'

    assert "vitexport export: onnx" in texts(result, "text/html")[0]
    assert result.outputs[0].data["text/plain"].startswith("{'backend': 'onnx'")

    [line] = [o.data["text/plain"] for o in wrong.outputs]  # the API's TypeError: one line too
    assert line.startswith("error: api.verify: artifact should be") and "Traceback" not in line

    [raised] = [o for o in own.outputs if o.output_type == "error"]
    assert raised.ename == "ValueError" and any("forward" in line for line in raised.traceback)

    # Libraries' chatter is held back while the API works; the notebook's own output is not.
    assert "".join(texts(chatter)).split() == "the notebook says and after".split()
