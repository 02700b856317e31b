"""The checker must be able to fail: planted faults end in exit 4 (or a lint error) and say where."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from vitexport import api
from vitexport.backends.base import ExportOptions
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.backends.onnx_common.lint import lint_onnx
from vitexport.backends.onnx_common.localize import node_scope
from vitexport.core.errors import ExportError, ParityError
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

PLANTED = Path(__file__).resolve().parents[1] / "planted.py"
DEEP_TINY = SourceSpec("tiny", overrides={"depth": 4})


def perturb_block(path: str, block: str, amount: float = 0.05) -> list[str]:
    """Shift every weight read by nodes inside `block`'s scope."""
    model = onnx.load(path)
    used = {name for node in model.graph.node if node_scope(node) == block or node_scope(node).startswith(block + ".")
            for name in node.input}
    touched = []
    for init in model.graph.initializer:
        if init.name in used and init.data_type == onnx.TensorProto.FLOAT and np.prod(init.dims) > 1:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) + np.float32(amount), init.name))
            touched.append(init.name)
    onnx.save(model, path)
    return touched


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
@pytest.mark.parametrize("block", ["blocks.0", "blocks.2"])
def test_perturbed_block_is_named(out_dir, exporter, block):
    result = api.export("onnx", DEEP_TINY, OnnxOptions(exporter=exporter, opset=18), out_dir)
    assert perturb_block(result["artifact"], block)
    with pytest.raises(ParityError) as info:
        api.verify(result["artifact"])
    divergence = info.value.result["parity"]["divergence"]
    assert divergence["first_divergent_block"] == block
    earlier = [row for row in divergence["blocks"] if row["block"] < block]
    assert all(row["passed"] for row in earlier)


def test_hard_coded_batch_fails_on_a_dynamic_export(out_dir):
    """Traced at batch 2 (never 1, so no size-1 dimension is specialised), the hard-coded reshape to
    batch 1 cannot run, and both exporters say so; nothing is written."""
    spec = SourceSpec(f"{PLANTED}:batch_one_reshape")
    with pytest.raises(ExportError, match=r"legacy exporter failed: .*shape '\[1, 32, 16\]' is invalid"):
        api.export("onnx", spec, ExportOptions(dynamic_batch=True), out_dir)
    assert not list(out_dir.glob("*.onnx"))


def test_hard_coded_batch_is_linted(tmp_path):
    import torch
    from planted import batch_one_reshape

    path = tmp_path / "m.onnx"
    torch.onnx.export(batch_one_reshape().eval(), (torch.randn(1, 3, 32, 32),), str(path), dynamo=False,
                      opset_version=17, input_names=["x"], dynamic_axes={"x": {0: "n"}})
    findings = lint_onnx(path, dynamic_batch=True)
    assert [f.rule for f in findings if f.severity == "error"] == ["baked-batch"]


def test_a_leading_unit_dimension_that_keeps_the_batch_is_not_baked(tmp_path):
    """[batch, d] -> [1, batch, d]: nn.MultiheadAttention with one query (SigLIP's pooling head) under
    the dynamo exporter. A reshape whose output loses the batch is still an error."""
    import onnx
    from onnx import TensorProto, helper

    def graph(out_dims):
        shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, -1, 8])
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
        return helper.make_model(helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)], [shape]))

    carried, lost = tmp_path / "carried.onnx", tmp_path / "lost.onnx"
    onnx.save(graph([1, "batch", 8]), str(carried))
    onnx.save(graph([1, None, 8]), str(lost))
    assert [f.rule for f in lint_onnx(carried, dynamic_batch=True) if f.severity == "error"] == []
    assert [f.rule for f in lint_onnx(lost, dynamic_batch=True) if f.severity == "error"] == ["baked-batch"]


@pytest.mark.parametrize("backend", ["onnx", "torchscript"])
def test_active_dropout_fails(out_dir, backend):
    with pytest.raises(ParityError) as info:
        api.export(backend, SourceSpec(f"{PLANTED}:active_dropout"), ExportOptions(), out_dir)
    report = info.value.result["parity"]
    assert not report["passed"]
    if backend == "onnx":
        assert report["deterministic"] is False or any(f["rule"] == "random-op" for f in report["lint"])


def test_fp16_noise_fails_fp32_tolerance_but_passes_fp16(out_dir):
    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 2}), ExportOptions(), out_dir)
    model = onnx.load(result["artifact"])
    for init in model.graph.initializer:  # what an fp16 engine stores: weights rounded to half precision
        if init.data_type == onnx.TensorProto.FLOAT:
            array = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(array, init.name))
    onnx.save(model, result["artifact"])
    with pytest.raises(ParityError, match="changed since export"):  # whatever the tolerance: not what was exported
        api.verify(result["artifact"], atol=5e-2, rtol=5e-2)
    record = sidecar.read(result["artifact"])  # as if an fp16-storing exporter had written it
    record.artifact_sha256 = sidecar.digest(result["artifact"])
    sidecar.write(sidecar.path_for(Path(result["artifact"])), record)
    with pytest.raises(ParityError, match="does not match PyTorch"):
        api.verify(result["artifact"])
    assert api.verify(result["artifact"], atol=5e-2, rtol=5e-2)["parity"]["passed"]


def test_clean_export_is_deterministic_and_lint_free(out_dir):
    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 2}), ExportOptions(dynamic_batch=True), out_dir)
    report = result["parity"]
    assert report["deterministic"] is True
    assert [f for f in report["lint"] if f["severity"] == "error"] == []
    assert report["batches"] == [1, 3, 8]


def test_decomposed_layernorm_is_flagged_for_fp16(tmp_path):
    import torch

    from vitexport.models.presets import PRESETS
    from vitexport.models.vit import build

    path = tmp_path / "old.onnx"
    model = build(PRESETS["tiny"].replace(depth=1, image_size=32, patch_size=8))
    torch.onnx.export(model, (torch.randn(1, 3, 32, 32),), str(path), dynamo=False, opset_version=16)
    findings = [f for f in lint_onnx(path, False, "fp16") if f.rule == "decomposed-layernorm"]
    assert len(findings) == 3 and {f.severity for f in findings} == {"warning"}  # norm1, norm2, final norm
    assert not [f for f in lint_onnx(path, False, "fp32") if f.severity != "info"]


def test_lint_infers_shapes_without_copying_weights_and_finds_the_same():
    """Shape inference on the graph without its weight bytes gives the same shapes as on the whole
    model, and leaves the model it was given untouched."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from vitexport.backends.onnx_common.lint import without_weights

    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    shape = numpy_helper.from_array(np.array([-1, 2, 2], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [weight, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    light = without_weights(model)
    assert not light.graph.initializer[0].raw_data and light.graph.initializer[1].raw_data  # the vector stays
    assert model.graph.initializer[0].raw_data == weight.raw_data
    full, lean = onnx.shape_inference.infer_shapes(model), onnx.shape_inference.infer_shapes(light)
    assert [str(v) for v in full.graph.value_info] == [str(v) for v in lean.graph.value_info]
    assert [str(v) for v in lean.graph.output] == [str(v) for v in full.graph.output]
    assert "dim_value: 2" in str(lean.graph.output[0])  # the Reshape's constant was read
