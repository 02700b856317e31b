"""`vitexport optimize`: candidates built, verified and timed in one run; the fastest passing one is
published with the reason; nothing is published when nothing passes."""

import json
from pathlib import Path

from typer.testing import CliRunner

from vitexport import sidecar
from vitexport.cli import app

ROOT = Path(__file__).resolve().parents[1]
PLANTED = Path(__file__).with_name("planted.py")


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_publishes_the_fastest_candidate_that_passes(tmp_path):
    result = invoke("optimize", "--config", "digits", "--weights", ROOT / "samples/digits/digits_vit.safetensors",
                    "--images", ROOT / "samples/digits/holdout", "--budget-s", "0.5", "--out", tmp_path, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    rows = {r["candidate"]: r for r in data["candidates"]}
    assert {"fp32", "fp32-slim", "int8-dynamic", "int8-static"} <= set(rows)
    assert all(r["passed"] and r["p50_ms"] > 0 for r in rows.values())
    chosen = rows[data["chosen"]]
    assert chosen["p50_ms"] == min(r["p50_ms"] for r in rows.values())
    assert rows["fp32"]["speedup"] == 1.0
    record = sidecar.read(data["artifact"])
    assert Path(data["artifact"]).name == "digits-optimized.onnx" and record.status == "verified"
    choice = record.info["optimize_choice"]
    assert choice["chosen"] == data["chosen"] and "fastest" in choice["why"]
    assert set(record.info["optimize_choice"]["others"]) == set(rows) - {data["chosen"]}
    table = invoke("optimize", "--config", "tiny", "--set", "depth=1", "--budget-s", "0.2", "--out", tmp_path / "again")
    assert table.exit_code == 0 and "chosen" in table.stdout and "int8-dynamic" in table.stdout
    assert "int8-static" not in table.stdout  # nothing to calibrate on without images


def test_refuses_when_no_candidate_passes(tmp_path):
    """A model whose dropout stays active fails every candidate's determinism check: exit 4, nothing published."""
    result = invoke("optimize", "--model", f"{PLANTED}:active_dropout", "--budget-s", "0.2", "--out", tmp_path)
    assert result.exit_code == 4, result.stderr
    assert "no candidate passed" in result.stderr and "failed" in result.stdout
    assert not list(tmp_path.glob("*.onnx"))


def test_bad_target_is_exit_2(tmp_path):
    result = invoke("optimize", "--config", "tiny", "--target", "tpu", "--out", tmp_path)
    assert result.exit_code == 2 and "--target must be one of cpu, cuda" in result.stderr


def test_bad_bench_settings_are_exit_2_before_any_candidate(tmp_path):
    result = invoke("optimize", "--config", "tiny", "--batch", "0", "--out", tmp_path)
    assert result.exit_code == 2 and "--batch" in result.stderr
    assert not (tmp_path / "candidates").exists()


def test_a_target_that_cannot_run_here_is_exit_3_before_any_candidate(tmp_path, monkeypatch):
    from vitexport import backends

    onnx = type(backends.get("onnx"))
    monkeypatch.setattr(onnx, "bench_unavailable", lambda self, target: "no CUDA provider in this onnxruntime"
                        if target.name == "onnxruntime-cuda" else None)
    result = invoke("optimize", "--config", "tiny", "--target", "cuda", "--out", tmp_path)
    assert result.exit_code == 3, result.stderr
    assert "onnxruntime-cuda cannot run here: no CUDA provider" in result.stderr
    assert not (tmp_path / "candidates").exists()
