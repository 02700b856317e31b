"""Exports of one loaded model (optimize's candidates) load it once and run PyTorch once per input:
the checks take its outputs from the model's memo, and reach the same verdict."""

from __future__ import annotations

from vitexport.export import pipeline
from vitexport.models import sources
from vitexport.models.sources import SourceSpec
from vitexport.verify import reference

SPEC = SourceSpec("tiny", overrides={"depth": 1})


def test_pytorch_runs_once_per_input_across_exports_of_one_loaded_model(out_dir, monkeypatch):
    loaded = sources.load(SPEC)
    calls = []
    run = reference.EagerRunner.run
    monkeypatch.setattr(reference.EagerRunner, "run", lambda self, feed: calls.append(1) or run(self, feed))

    def no_second_load(spec):
        raise AssertionError("loaded again")

    monkeypatch.setattr(sources, "load", no_second_load)
    first = pipeline.export("onnx", SPEC, None, out_dir, name="first", loaded=loaded)
    runs = len(calls)
    second = pipeline.export("onnx", SPEC, None, out_dir, name="second", loaded=loaded)
    assert runs > 0 and len(calls) == runs
    assert first["parity"]["passed"] and second["parity"]["passed"]
    assert first["parity"]["max_abs_error"] == second["parity"]["max_abs_error"]  # one artifact, same inputs


def test_another_input_is_run_again(out_dir):
    loaded = sources.load(SPEC)
    pipeline.export("onnx", SPEC, None, out_dir, name="first", loaded=loaded, seed=0)
    before = len(loaded.memo)
    pipeline.export("onnx", SPEC, None, out_dir, name="second", loaded=loaded, seed=1)
    assert len(loaded.memo) > before

