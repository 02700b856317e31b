"""Cache keys cost little per cell: a backend's tool versions (a scan of every installed distribution)
are read once per run, not once per export, and the keys are the same as when each export read them."""

from __future__ import annotations

from vitexport.core import environment
from vitexport.matrix import keys
from vitexport.matrix.plan import load_plan
from vitexport.matrix.run import Matrix

PLAN = """
name = "keys"

[bench]
batches = [1]
roofline = false

[[models]]
config = "tiny"
set = { depth = 1 }

[[models]]
config = "tiny"
set = { depth = 2 }

[[models]]
config = "small"
set = { depth = 1 }

[[targets]]
backend = "onnx"
precision = "fp32"

[[targets]]
backend = "onnx"
precision = "int8"

[[targets]]
backend = "torchscript"
"""


def test_tool_versions_are_read_once_per_backend_and_keys_do_not_change(tmp_path, monkeypatch):
    plan_path = tmp_path / "plan.toml"
    plan_path.write_text(PLAN)
    plan = load_plan(plan_path)
    scans = []
    real = environment.versions
    monkeypatch.setattr(environment, "versions", lambda packages: scans.append(packages) or real(packages))
    matrix = Matrix(plan, tmp_path / "out")
    assert len(matrix.exports) == 9 and len(scans) == 2  # onnx and torchscript, each once

    # Each export reading its own versions, as before, gives the same keys.
    fresh = [keys.digest(keys.export_inputs(plan, e.model, e.target, keys.Digests())) for e in matrix.exports]
    assert [e.key for e in matrix.exports] == fresh
    assert len(set(fresh)) == 9


def test_a_runs_versions_cannot_be_changed_through_a_key(monkeypatch):
    digests = keys.Digests()
    monkeypatch.setattr(keys, "tool_versions", lambda backend: {"onnx": "1.0"})
    first = digests.tools("onnx")
    first["onnx"] = "edited"
    assert digests.tools("onnx") == {"onnx": "1.0"}
