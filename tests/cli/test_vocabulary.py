"""One vocabulary across the CLI: the model is always named, never a silent default."""

import pytest
from typer.testing import CliRunner

from vitexport.cli.app import app


@pytest.mark.parametrize("command", ["onnx", "torchscript", "optimize", "bench"])
def test_a_command_without_a_model_says_so_and_writes_nothing(tmp_path, command):
    result = CliRunner().invoke(app, [command, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "--config NAME" in result.output and "--model SPEC" in result.output
    assert not (tmp_path / "out").exists()


def test_bench_json_prints_the_report_on_stdout_like_every_command(monkeypatch, tmp_path):
    import json

    from fake_workers import Fake, install

    install(monkeypatch, Fake(model_ms=lambda job, batch: 5.0))
    result = CliRunner().invoke(app, ["bench", "--config", "tiny", "--set", "depth=1", "--backend", "torch",
                                      "--no-roofline", "--budget-s", "0.5", "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["results"][0]["backend"] == "torch" and "p50" in report["results"][0]["latency_ms"]


@pytest.mark.parametrize("argv, rewritten", [
    (["bench", "a.onnx", "--json", "r.json"], ["bench", "a.onnx", "--json-path", "r.json"]),
    (["bench", "--json=r.json", "a.onnx"], ["bench", "--json-path", "r.json", "a.onnx"]),
    (["bench", "a.onnx", "--json", "--quiet"], ["bench", "a.onnx", "--json", "--quiet"]),
    (["bench", "--json", "a.onnx"], ["bench", "--json", "a.onnx"]),  # an artifact after --json is an artifact
    (["onnx", "--json", "x.json"], ["onnx", "--json", "x.json"]),  # other commands never took a path
    (["bench", "--", "--json", "r.json"], ["bench", "--", "--json", "r.json"]),
])
def test_old_spellings_are_rewritten_with_a_notice(argv, rewritten):
    from vitexport.cli.spellings import modernised

    out, notices = modernised(argv)
    assert out == rewritten
    assert len(notices) == (out != argv) and all("--json" in n for n in notices)
