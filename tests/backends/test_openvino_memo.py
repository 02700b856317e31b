"""OpenVINO exports of one loaded model (optimize's fp32, bf16 and int8 candidates) convert it once:
the converted graph is kept in the model's memo and each export works on its own copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitexport import backends
from vitexport.export import pipeline
from vitexport.models import sources
from vitexport.models.sources import SourceSpec

ROOT = Path(__file__).resolve().parents[2]
SPEC = SourceSpec("tiny", overrides={"depth": 1})


def test_openvino_exports_of_one_loaded_model_convert_it_once(out_dir, monkeypatch):
    be = backends.get("openvino")
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    from vitexport.backends.openvino import convert

    calls = []
    real = convert.convert
    monkeypatch.setattr(convert, "convert", lambda *a: calls.append(1) or real(*a))
    loaded = sources.load(SPEC)
    fp32 = pipeline.export("openvino", SPEC, be.Options(dynamic_batch=True), out_dir, name="fp32", loaded=loaded)
    int8 = pipeline.export("openvino", SPEC, be.Options(dynamic_batch=True, precision="int8",
                                                         calibration_images=str(ROOT / "samples" / "images")),
                           out_dir, name="int8", loaded=loaded)
    assert fp32["parity"]["passed"] and int8["parity"]["passed"] and len(calls) == 1
    again = pipeline.export("openvino", SPEC, be.Options(dynamic_batch=True), out_dir, name="again", loaded=loaded)
    assert again["parity"]["max_abs_error"] == fp32["parity"]["max_abs_error"]  # the copy was not quantized
    static = pipeline.export("openvino", SPEC, be.Options(), out_dir, name="static", loaded=loaded)
    assert static["parity"]["passed"] and len(calls) == 2  # another graph shape is converted anew

