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
