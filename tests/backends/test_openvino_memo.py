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


def test_int8_irs_of_one_loaded_model_are_calibrated_once_per_keep_list(out_dir, monkeypatch):
    """optimize's int8 candidates differ only in their float part's precision: NNCF calibrates once,
    and the cache is looked up without serialising the model (a ViT-B's takes a second); another
    keep-list calibrates anew."""
    be = backends.get("openvino")
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    import nncf
    import openvino

    calls = []
    real = nncf.quantize
    monkeypatch.setattr(nncf, "quantize", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(openvino, "serialize", lambda *a, **k: pytest.fail("serialised the model"))
    loaded = sources.load(SPEC)
    int8 = dict(dynamic_batch=True, precision="int8", calibration_images=str(ROOT / "samples" / "images"))
    first = pipeline.export("openvino", SPEC, be.Options(**int8), out_dir, name="first", loaded=loaded)
    again = pipeline.export("openvino", SPEC, be.Options(**int8), out_dir, name="again", loaded=loaded)
    assert first["parity"]["passed"] and again["parity"]["max_abs_error"] == first["parity"]["max_abs_error"]
    assert len(calls) == 1
    kept = pipeline.export("openvino", SPEC, be.Options(**int8, keep_fp32=("blocks.0.mlp",)), out_dir, name="kept",
                           loaded=loaded)
    assert kept["parity"]["passed"] and len(calls) == 2
    assert any("blocks.0.mlp" in name for name in kept["info"]["int8"]["kept_float"])
