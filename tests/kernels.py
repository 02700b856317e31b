"""Running notebooks in a real Jupyter kernel from the tests: a kernel spec for the interpreter that
runs the tests (so a fresh CI venv needs no `ipykernel install`, and no other Python's kernel is
picked up), and a notebook executed by nbclient in a folder of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

KERNEL = "vitexport-tests"


def use_this_interpreter(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Write a kernel spec running this interpreter under `folder` and put it first on Jupyter's
    path for the test; return its name. The kernel inherits this process's environment
    (PYTHONPATH included), so it imports the vitexport under test."""
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(folder / "kernels" / KERNEL, overrides={"display_name": "vitexport tests"})
    monkeypatch.setenv("JUPYTER_PATH", str(folder))
    monkeypatch.setenv("IPYTHONDIR", str(folder / "ipython"))  # no history or profile in the home folder
    monkeypatch.setenv("MPLBACKEND", "agg")
    return KERNEL


def execute(notebook, cwd: Path, kernel: str, cell_timeout: int = 600, allow_errors: bool = False):
    """Run every cell of `notebook` (an nbformat node) in a new kernel started in `cwd`, in place;
    return it with its outputs. A failing cell raises nbclient's CellExecutionError (with its
    traceback) unless `allow_errors`."""
    from nbclient import NotebookClient

    client = NotebookClient(notebook, kernel_name=kernel, timeout=cell_timeout, allow_errors=allow_errors,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return notebook


def texts(cell, mime: str = "text/plain") -> list[str]:
    """What a cell's outputs say in `mime` (streams count as text/plain), in order."""
    found = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream" and mime == "text/plain":
            found.append(output["text"])
        elif mime in output.get("data", {}):
            found.append(output["data"][mime])
    return found
