"""ONNX exports of big models without a second copy of the weights: the Linear weights laid out in the
graph's order (same values, a view of the transpose), and external data streamed into the published
file tensor by tensor, aligned, whatever lengths the exporter recorded."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from vitexport.backends.onnx import export as onnx_export
from vitexport.backends.onnx.external import ALIGN, external_bytes, relocate
from vitexport.backends.onnx.layout import transposed_linears
from vitexport.export import pipeline
from vitexport.models import sources
from vitexport.models.sources import SourceSpec


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), torch.nn.Linear(16, 8)
        self.c.weight = self.b.weight  # shared: left as it is

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.b(h) + self.c(h)


def test_linear_weights_take_the_graphs_order_with_the_same_outputs():
    torch.manual_seed(0)
    model = Tied().eval()
    x = torch.randn(3, 8)
    before = model(x)
    assert transposed_linears(model) == 1  # a only: b and c share their weight
    assert not model.a.weight.is_contiguous() and model.a.weight.t().is_contiguous()
    assert model.b.weight.is_contiguous() and model.c.weight is model.b.weight
    assert torch.allclose(model(x), before, atol=1e-6)


def test_a_callers_model_keeps_its_layout(out_dir):
    loaded = sources.load(SourceSpec("tiny", overrides={"depth": 1}))
    pipeline.export("onnx", loaded.spec, None, out_dir, loaded=loaded)
    assert all(m.weight.is_contiguous() for m in loaded.model.modules() if isinstance(m, torch.nn.Linear))


def graph_with_external(folder, lengths: bool):
    """Two weights in two files, as PyTorch's TorchScript exporter writes them (no lengths) or with them."""
    arrays = {"w1": np.arange(1000, dtype=np.float32).reshape(10, 100), "w2": np.ones((7, 3), np.float32)}
    inits = []
    for name, array in arrays.items():
        (folder / f"{name}.bin").write_bytes(b"\0" * 12 + array.tobytes())  # an offset to honour
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape)
        t.data_location = TensorProto.EXTERNAL
        entries = {"location": f"{name}.bin", "offset": "12"} | ({"length": str(array.nbytes)} if lengths else {})
        for k, v in entries.items():
            e = t.external_data.add()
            e.key, e.value = k, v
        inits.append(t)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["w1"], ["y"])], "g", [], [out], initializer=inits)
    return helper.make_model(graph), arrays


@pytest.mark.parametrize("lengths", [True, False])
def test_external_data_is_streamed_aligned(tmp_path, lengths):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    model, arrays = graph_with_external(src, lengths)
    assert external_bytes(model, src) == sum(a.nbytes for a in arrays.values())
    relocate(model, src, dst / "m.onnx.data")
    (dst / "m.onnx").write_bytes(model.SerializeToString())
    back = onnx.load(str(dst / "m.onnx"))
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), arrays[t.name])
    offsets = [int({e.key: e.value for e in t.external_data}["offset"]) for t in model.graph.initializer]
    assert all(o % ALIGN == 0 for o in offsets) and len(set(offsets)) == 2


def test_a_location_outside_the_folder_is_refused(tmp_path):
    model, _ = graph_with_external(tmp_path, True)
    model.graph.initializer[0].external_data[0].value = "../elsewhere.bin"
    with pytest.raises(ValueError, match="outside"):
        relocate(model, tmp_path, tmp_path / "out.data")


def test_an_export_over_the_limit_publishes_streamed_external_data(out_dir, monkeypatch):
    from vitexport.backends.onnx.options import OnnxOptions

    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_THRESHOLD", 100_000)  # tiny stands in for a 2 GB model
    # The dynamo exporter writes its weights to a file at any size (the TorchScript one above 2 GB only).
    result = pipeline.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), OnnxOptions(exporter="dynamo"),
                             out_dir)
    assert result["parity"]["passed"] and result["info"]["external_data"] == "tiny-depth1.onnx.data"
    assert (out_dir / "tiny-depth1.onnx.data").stat().st_size > 3_000_000
    graph = onnx.load(str(out_dir / "tiny-depth1.onnx"), load_external_data=False).graph
    offsets = [int({e.key: e.value for e in t.external_data}["offset"]) for t in graph.initializer if t.external_data]
    assert offsets and all(o % ALIGN == 0 for o in offsets)  # streamed by vitexport, mappable by a runtime
