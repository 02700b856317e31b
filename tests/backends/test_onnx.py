"""What the ONNX backend promises beyond parity: opsets, exporters, real dynamic batch, metadata, external data."""

import numpy as np
import onnx
import pytest

from vitexport import api
from vitexport.backends.base import RunOptions
from vitexport.backends.onnx import export as onnx_export
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.core.errors import ParityError, UsageError
from vitexport.models.sources import SourceSpec

TINY = SourceSpec("tiny", overrides={"depth": 2})


def export(out_dir, spec=TINY, **options):
    return api.export("onnx", spec, OnnxOptions(**options), out_dir)


@pytest.mark.parametrize("exporter,opset", [("legacy", 17), ("legacy", 20), ("dynamo", 18), ("dynamo", 23)])
def test_exporter_and_opset_are_honoured_and_recorded(out_dir, exporter, opset):
    result = export(out_dir, exporter=exporter, opset=opset, dynamic_batch=True)
    model = onnx.load(result["artifact"])
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    assert result["info"]["exporter"] == exporter and result["info"]["opset"] == opset
    assert result["parity"]["passed"]


def test_dynamic_batch_is_really_dynamic(out_dir):
    import onnxruntime as ort

    result = export(out_dir, dynamic_batch=True)
    model = onnx.load(result["artifact"])
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    session = ort.InferenceSession(result["artifact"], providers=["CPUExecutionProvider"])
    for batch in (1, 2, 5):
        out = session.run(None, {"pixel_values": np.zeros((batch, 3, 224, 224), np.float32)})[0]
        assert out.shape == (batch, 1000)


def test_static_export_keeps_a_fixed_batch(out_dir):
    model = onnx.load(export(out_dir)["artifact"])
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1


def test_metadata_and_names_are_embedded(out_dir):
    model = onnx.load(export(out_dir)["artifact"])
    meta = {p.key: p.value for p in model.metadata_props}
    assert model.producer_name == "vitexport"
    assert meta["vitexport.source"] == "tiny"
    assert [i.name for i in model.graph.input] == ["pixel_values"]
    assert [o.name for o in model.graph.output] == ["logits"]
    onnx.checker.check_model(model, full_check=True)


def test_auto_falls_back_to_dynamo_and_records_why(out_dir):
    from zoo_models import zoo_spec

    # lazy_vit takes a normalised shape from x.shape, which the legacy exporter cannot keep dynamic.
    result = export(out_dir, spec=SourceSpec(zoo_spec("lazy_vit")), dynamic_batch=True)
    assert result["info"]["exporter"] == "dynamo"
    assert "legacy exporter failed" in result["info"]["exporter_fallback_reason"]
    assert result["parity"]["passed"]


def test_large_models_go_to_external_data(out_dir, monkeypatch):
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_THRESHOLD", 1000)  # as if the model were over 2 GB
    result = export(out_dir)
    data = out_dir / "tiny-depth2.onnx.data"
    assert result["info"]["external_data"] == "tiny-depth2.onnx.data" and data.stat().st_size > 1_000_000
    assert result["parity"]["passed"]
    assert api.verify(result["artifact"])["parity"]["passed"]
    # The recorded digest covers the external weights too.
    with open(data, "r+b") as f:
        f.seek(data.stat().st_size // 2)
        f.write(b"\x7f\x7f\x7f\x7f")
    with pytest.raises(ParityError) as info:
        api.verify(result["artifact"])
    assert info.value.result["artifact_modified"]


def test_altered_weights_fail_verify(out_dir):
    from onnx import numpy_helper

    result = export(out_dir)
    path = result["artifact"]
    model = onnx.load(path)
    big = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    array = numpy_helper.to_array(big).copy()
    array += 0.05
    big.CopyFrom(numpy_helper.from_array(array, big.name))
    onnx.save(model, path)
    with pytest.raises(ParityError) as info:
        api.verify(path)
    assert info.value.result["artifact_modified"] is True
    assert info.value.result["parity"]["passed"] is False


@pytest.mark.parametrize("options,message", [
    ({"opset": 12}, "opset 12 is not supported"),
    ({"opset": 99}, "opset 99 is not supported"),
    ({"exporter": "magic"}, "--exporter must be one of"),
    ({"input_name": "x", "output_name": "x"}, "must differ"),
])
def test_bad_options(out_dir, options, message):
    with pytest.raises(UsageError, match=message):
        export(out_dir, **options)


def test_a_missing_provider_is_exit_3_unless_fallback_is_allowed(out_dir):
    import onnxruntime as ort

    from vitexport.core.errors import BackendUnavailable

    result = export(out_dir)
    session = ort.InferenceSession(result["artifact"], providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if session.get_providers()[0] == "CUDAExecutionProvider":
        pytest.skip("CUDA provider works here")
    with pytest.raises(BackendUnavailable, match="CUDAExecutionProvider was requested"):
        api.verify(result["artifact"], run=RunOptions(providers=("CUDAExecutionProvider",), allow_fallback=False))
    fallback = api.verify(result["artifact"], run=RunOptions(providers=("CUDAExecutionProvider",),
                                                             allow_fallback=True))
    assert fallback["provider"] == "CPUExecutionProvider"
