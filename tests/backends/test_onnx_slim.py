"""`--optimize slim`: onnxslim's graph, with its shape inference never handed the weights' bytes."""

from __future__ import annotations

import onnx
import pytest

from vitexport.backends.onnx.optimize import slim

onnxslim = pytest.importorskip("onnxslim")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from vitexport import api
    from vitexport.backends.onnx.options import OnnxOptions

    out = tmp_path_factory.mktemp("slim")
    spec = api.SourceSpec("tiny", overrides={"depth": 2})
    return api.export("onnx", spec, OnnxOptions(dynamic_batch=True), out, verify=False)["artifact"]


def test_the_graph_is_onnxslims_own(traced, tmp_path):
    slim(traced, tmp_path / "slim.onnx")
    ours, theirs = onnx.load(str(tmp_path / "slim.onnx")), onnxslim.slim(str(traced))
    assert len(ours.graph.node) < len(onnx.load(str(traced)).graph.node)
    assert list(ours.graph.node) == list(theirs.graph.node)
    assert list(ours.graph.initializer) == list(theirs.graph.initializer)
    assert list(ours.graph.value_info) == list(theirs.graph.value_info)
    assert ours.graph.input == theirs.graph.input and ours.graph.output == theirs.graph.output


def test_shape_inference_never_sees_the_weights(traced, tmp_path, monkeypatch):
    import onnxslim.core

    real, seen = onnxslim.core.shape_infer, []

    def watched(model):
        seen.append(max(len(t.raw_data) for t in model.graph.initializer if len(t.dims) >= 2))
        return real(model)

    monkeypatch.setattr(onnxslim.core, "shape_infer", watched)
    slim(traced, tmp_path / "slim.onnx")
    assert seen and max(seen) == 0
