"""Closed and broken output streams: a daemon without streams, `>&-`, a reader that goes away early.
The work is done and published whatever happens to printing; the exit is non-zero and never an
internal error."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vitexport.export import sidecar

TINY = ["--config", "tiny", "--set", "depth=1"]


def vitexport(args, cwd: Path, *, close: tuple[int, ...] = (), stdout=None, stderr=None):
    """Run the CLI as a shell would with `>&-` or `2>&-`: the descriptors in `close` are closed before
    Python starts, so it has no sys.stdout (or sys.stderr) at all."""
    def closing():
        for fd in close:
            os.close(fd)

    return subprocess.run([sys.executable, "-m", "vitexport", *args], cwd=cwd, stdout=stdout, stderr=stderr,
                          text=True, timeout=300, preexec_fn=closing)


def published(folder: Path, name: str) -> bool:
    artifact = folder / "vitexport-out" / f"{name}.onnx"
    return artifact.is_file() and sidecar.read(artifact).status == "verified"


@pytest.mark.parametrize("flags", [["--json"], []])
def test_a_closed_stdout_still_publishes_and_exits_non_zero(tmp_path, flags):
    run = vitexport(["onnx", *TINY, "--name", "closed", *flags], tmp_path, close=(1,), stderr=subprocess.PIPE)
    assert run.returncode == 1, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
    assert "stdout closed" in run.stderr.splitlines()[-1]
    assert published(tmp_path, "closed")


def test_no_streams_at_all_is_not_an_internal_error(tmp_path):
    run = vitexport(["onnx", *TINY, "--name", "daemon"], tmp_path, close=(1, 2))
    assert run.returncode == 1
    assert published(tmp_path, "daemon")


@pytest.mark.parametrize("args", [["configs", "--json"], ["configs"], ["onnx", *TINY, "--name", "piped", "--json"]])
def test_a_reader_that_went_away_is_a_quiet_non_zero_exit(tmp_path, args):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        run = vitexport(args, tmp_path, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert run.returncode == 1
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr and "Exception" not in run.stderr
    if args[0] == "onnx":
        assert published(tmp_path, "piped")


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_any_character_a_report_holds_reaches_a_terminal_of_any_encoding(tmp_path, encoding):
    """A model named in Greek, a table's ±: on a terminal whose encoding lacks them they are written
    escaped, never an internal error."""
    import json

    seed = Path(__file__).resolve().parents[1] / "data" / "door" / "matrix-report.json"
    report = json.loads(seed.read_text(encoding="utf-8"))
    report["model"] = "ViT Ω ✓ 𝛑"
    (tmp_path / "r.json").write_text(json.dumps(report, ensure_ascii=False), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "vitexport", "compare", "r.json", "--out", "out"], cwd=tmp_path,
                         capture_output=True, timeout=300, env={**os.environ, "PYTHONIOENCODING": encoding})
    text = (run.stdout + run.stderr).decode(encoding)
    assert run.returncode == 0 and "internal error" not in text, text[-2000:]
    assert ("±" if encoding == "latin-1" else "\\xb1") in text  # the table's mean±sd, as the terminal can show it
