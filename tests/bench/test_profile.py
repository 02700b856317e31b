"""`bench --profile`: operators classified per runtime, a row's classes adding up to what its profiler
measured, the lines, JSON and page that show it, and no profiler at all without the flag."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vitexport.bench.opclasses import CLASSES, TABLES, classify
from vitexport.bench.profile import summarise
from vitexport.cli.app import app

# Operator types as each runtime's profiler names them (seen in its traces of a ViT), with their class.
KNOWN = {
    "onnxruntime": [("MatMulInteger", "matmul"), ("DynamicQuantizeMatMul", "matmul"), ("ConvInteger", "matmul"),
                    ("DynamicQuantizeLinear", "quantize"), ("Cast", "quantize"), ("LayerNormalization", "norm"),
                    ("SkipLayerNormalization", "norm"), ("Softmax", "attention"), ("Attention", "attention"),
                    ("Gelu", "activation"), ("Erf", "activation"), ("Transpose", "layout"), ("Reshape", "layout"),
                    ("Add", "other"), ("Mul", "other")],
    "openvino": [("FullyConnected", "matmul"), ("FullyConnectedQuantizedLegacy", "matmul"), ("Convolution", "matmul"), ("ScaledDotProductAttention", "attention"),
                 ("MVN", "norm"), ("Gelu", "activation"), ("FakeQuantize", "quantize"), ("Convert", "quantize"),
                 ("Reorder", "layout"), ("Transpose", "layout"), ("Add", "other"), ("PowerStatic", "other")],
    "torch": [("aten::addmm", "matmul"), ("aten::mkldnn_convolution", "matmul"),
              ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"), ("aten::_softmax", "attention"),
              ("aten::native_layer_norm", "norm"), ("aten::gelu", "activation"), ("aten::dequantize", "quantize"),
              ("aten::copy_", "layout"), ("aten::cat", "layout"), ("aten::add", "other")],
    "executorch": [("Fully Connected (NC, QD8, F32, QC8W)", "matmul"), ("Convert (NC, F32, QD8)", "quantize"),
                   ("native_layer_norm.out", "norm"), ("Softmax (NC, F32)", "attention"),
                   ("gelu.out", "activation"), ("Transpose (ND, X32)", "layout"), ("add.out", "other")],
    "tensorrt": [("MatrixMultiply", "matmul"), ("Convolution", "matmul"), ("SoftMax", "attention"),
                 ("Normalization", "norm"), ("Activation", "activation"), ("Quantize", "quantize"),
                 ("Reformat", "layout"), ("ElementWise", "other")],
}


def test_every_runtime_with_a_table_has_known_names_here():
    assert set(KNOWN) == set(TABLES)


@pytest.mark.parametrize("runtime", sorted(TABLES))
def test_the_classifier_maps_each_runtimes_operator_names(runtime):
    wrong = [(op, cls, classify(runtime, op)) for op, cls in KNOWN[runtime] if classify(runtime, op) != cls]
    assert wrong == []
    assert classify(runtime, "SomethingNoTableKnows") == "other"


@pytest.mark.parametrize("runtime", sorted(TABLES))
def test_a_name_is_in_one_class_of_its_runtimes_table(runtime):
    seen: dict[str, str] = {}
    twice = []
    for cls, names in TABLES[runtime].items():
        assert cls in CLASSES
        for name in names:
            if name in seen:
                twice.append((name, seen[name], cls))
            seen[name] = cls
    assert twice == []


def test_a_fused_operator_is_classed_by_the_layer_its_name_keeps():
    name = "__module.blocks.3.attn/aten::scaled_dot_product_attention/ScaledDotProductAttention/fq_output_0"
    assert classify("openvino", "Subgraph", name) == "attention"
    assert classify("openvino", "Subgraph", "Multiply_42") == "other"


def test_the_classes_add_up_to_the_profiled_total_and_every_operator_lands_in_one():
    ops = [["fc", "MatMulInteger", 6.0], ["q", "DynamicQuantizeLinear", 1.5], ["ln", "LayerNormalization", 0.5],
           ["new", "BrandNewOp", 0.25], ["fc2", "MatMulInteger", 2.0]]
    p = summarise("onnxruntime", ops, runs=4, p50_ms=12.5, profiled_ms=13.0)
    assert p["total_ms"] == pytest.approx(10.25)
    assert sum(c["ms"] for c in p["classes"]) == pytest.approx(p["total_ms"])
    assert sum(c["share"] for c in p["classes"]) == pytest.approx(p["accounted"]) == pytest.approx(10.25 / 12.5)
    assert [c["class"] for c in p["classes"]] == list(CLASSES)
    by_type = {t["op_type"]: t for t in p["op_types"]}
    assert by_type["MatMulInteger"] == {"op_type": "MatMulInteger", "class": "matmul", "ms": 8.0, "count": 2}
    assert by_type["BrandNewOp"]["class"] == "other"
    assert [t["name"] for t in p["top"]] == ["fc", "fc2", "q", "ln", "new"]


@pytest.fixture
def fake(monkeypatch):
    from fake_workers import install

    return install(monkeypatch)


BENCH = ["bench", "--config", "tiny", "--set", "depth=1", "--no-roofline", "--budget-s", "0.5", "--batch", "2"]


def test_without_profile_nothing_is_profiled(fake, tmp_path):
    result = CliRunner().invoke(app, BENCH + ["--backend", "torch", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    assert [op for op, *_ in fake.log if op == "profile"] == []
    report = json.loads(result.stdout)
    assert "profile" not in report["results"][0] and report["settings"]["profile"] is False


def test_profile_adds_each_rows_breakdown_to_the_json_the_lines_and_the_page(fake, tmp_path):
    from vitexport.bench import stored

    result = CliRunner().invoke(app, BENCH + ["--backend", "torch", "--out", str(tmp_path), "--profile"])
    assert result.exit_code == 0, result.stderr
    profiles = [entry for entry in fake.log if entry[0] == "profile"]
    assert len(profiles) == 1 and profiles[0][2] == 2  # one row, profiled at its batch
    report = stored.load(tmp_path / "bench-tiny.json")  # the schema takes it
    p = report["results"][0]["profile"]
    assert p["available"] and p["runtime"] == "torch" and p["total_ms"] == pytest.approx(19.0)
    assert {c["class"]: c["ms"] for c in p["classes"]}["other"] == pytest.approx(1.0)  # the unknown op
    assert sum(c["share"] for c in p["classes"]) == pytest.approx(p["accounted"])
    assert p["accounted"] == pytest.approx(19.0 / report["results"][0]["latency_ms"]["p50"])
    assert "profile: torch fp32 batch 2: matrix products 16.00 ms" in result.stdout
    page = (tmp_path / "bench-tiny.html").read_text()
    assert 'id="profile"' in page and "matrix products: 16.00 ms" in page


def test_a_row_without_a_profiler_says_why_while_the_others_are_profiled(fake, tmp_path):
    from fake_workers import Fake

    fake.profile = lambda job, batch: (
        {"ok": False, "kind": "unavailable", "reason": "this runtime has no per-operator profiler in vitexport"}
        if batch == 2 else Fake().profile(job, batch))
    result = CliRunner().invoke(app, BENCH + ["--batch", "1", "--backend", "torch", "--out", str(tmp_path),
                                              "--profile"])
    assert result.exit_code == 0, result.stderr
    assert "torch fp32 batch 2: no profile: this runtime has no per-operator profiler" in result.stdout
    assert "torch fp32 batch 1: matrix products 8.00 ms" in result.stdout


def test_profile_with_no_row_profiled_exits_3_in_one_line(fake, tmp_path):
    fake.profile = lambda job, batch: {"ok": False, "kind": "unavailable", "reason": "no profiler here"}
    result = CliRunner().invoke(app, BENCH + ["--backend", "torch", "--out", str(tmp_path), "--profile"])
    assert result.exit_code == 3
    assert "--profile: no row could be profiled here: no profiler here" in result.stderr
    assert "Traceback" not in result.output


def test_profile_with_a_batch_sweep_is_bad_input(fake, tmp_path):
    result = CliRunner().invoke(app, ["bench", "--config", "tiny", "--backend", "torch", "--batch", "auto",
                                      "--profile", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--profile breaks down the batch sizes given" in result.stderr
    assert fake.log == []



def test_the_schema_knows_every_class():
    from typing import get_args

    from vitexport.core.schemas.profile import OP_CLASSES

    assert list(get_args(OP_CLASSES)) == list(CLASSES)


def test_a_worker_whose_runtime_has_no_profiler_says_so(echo_job):
    from vitexport.bench.rounds import WorkerProcess

    worker = WorkerProcess(1)
    try:
        assert worker.ask("open", **echo_job)["ok"]
        reply = worker.ask("profile", batch=1, runs=2, warmup_runs=0)
        assert reply == {"ok": False, "kind": "unavailable",
                         "reason": "this runtime has no per-operator profiler in vitexport"}
    finally:
        worker.kill()


@pytest.fixture
def echo_job(monkeypatch):
    import os
    from pathlib import Path

    from vitexport.backends.base import RunOptions
    from vitexport.export.sidecar import ArtifactRecord, SourceRecord

    tests = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tests), str(tests.parent),
                                                                     os.environ.get("PYTHONPATH")])))
    source = SourceRecord(spec={"model": "echo"}, kind="test", config=None, weights_sha256=None,
                          input_shape=[1, 3, 8, 8], preprocessing={})
    record = ArtifactRecord(backend="echo", artifact="", seed=0, precision="fp32", input_names=["x"],
                            output_names=["y"], input_shape=["batch", 3, 8, 8], dynamic_batch=True, options={},
                            info={"mode": "ok"}, source=source)
    return {"kind": "model", "backend": "echo", "module": "echo_backend", "artifact": None,
            "record": record.to_dict(), "threads": 1, "seed": 0, "run": vars(RunOptions())}


def test_onnxruntime_openvino_and_torch_rows_are_profiled_for_real(tmp_path):
    """The runtimes' own profilers on a one-block tiny ViT: every operator in a class, the classes adding
    up to the profiled total, their shares to what the profiler accounts for."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("openvino")
    result = CliRunner().invoke(app, ["bench", "--config", "tiny", "--set", "depth=1", "--no-roofline",
                                      "--backend", "onnxruntime", "--backend", "openvino", "--backend", "torch",
                                      "--iters", "3", "--rounds", "1", "--warmup-iters", "1", "--warmup-s", "0",
                                      "--threads", "1", "--profile", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert {r["backend"]: r["profile"]["runtime"] for r in rows} == {
        "onnxruntime": "onnxruntime", "openvino": "openvino", "torch": "torch"}
    for row in rows:
        p = row["profile"]
        assert p["available"] and p["operators"] > 0 and p["total_ms"] > 0, row["backend"]
        assert sum(c["ms"] for c in p["classes"]) == pytest.approx(p["total_ms"])
        assert sum(t["ms"] for t in p["op_types"]) == pytest.approx(p["total_ms"])
        assert sum(c["share"] for c in p["classes"]) == pytest.approx(p["accounted"])
        assert all(t["class"] in CLASSES for t in p["op_types"])
        # A ViT's matrix products are found by every runtime's table, whatever else it names its own way.
        assert {c["class"]: c["ms"] for c in p["classes"]}["matmul"] > 0, row["backend"]


def test_executorch_events_become_operators_without_framework_wrappers_or_instance_numbers():
    from vitexport.backends.executorch.profiling import operator_times

    events = [("Method::execute", [9.0, 9.0], False), ("DELEGATE_CALL", [8.0, 8.0], False),
              ("Fully Connected (NC, F32) GEMM #2", [5.0, 3.0], True), ("native_call_gelu.out", [1.0, 1.0], False)]
    ops = operator_times(events, runs=1)
    assert [(o.op_type, o.ms) for o in ops] == [("Fully Connected (NC, F32) GEMM", 3.0), ("gelu.out", 1.0)]
    assert classify("executorch", ops[0].op_type) == "matmul"


def test_onnxruntime_trace_keeps_the_runs_after_the_warm_up():
    from vitexport.backends.onnx.profiling import node_times

    def run(ts):
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": 50}

    def node(ts, dur):
        return {"cat": "Node", "name": "fc_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": "MatMulInteger"}}

    events = [run(0), node(1, 9000), run(100), node(101, 2000), {"cat": "Node", "name": "fc_fence_before", "ts": 102,
                                                                 "dur": 5}, run(200), node(201, 4000)]
    [op] = node_times(events, skip=1, runs=2)
    assert (op.name, op.op_type, op.ms) == ("fc", "MatMulInteger", 3.0)


def test_tensorrt_layer_times_skip_the_warm_up_and_take_types_from_the_inspector():
    from vitexport.backends.tensorrt.profiling import layer_times, layer_types

    engine = json.dumps({"Layers": [{"Name": "fc1", "LayerType": "MatrixMultiply"}, "named only"]})
    types = layer_types(engine)
    assert types == {"fc1": "MatrixMultiply"}
    events = [("fc1", 9.0), ("{ForeignNode[/attn/MatMul.../Softmax]}", 9.0),  # warm-up run
              ("fc1", 2.0), ("{ForeignNode[/attn/MatMul.../Softmax]}", 1.0),
              ("fc1", 4.0), ("{ForeignNode[/attn/MatMul.../Softmax]}", 3.0)]
    ops = layer_times(events, types, skip=1, runs=2)
    assert [(o.op_type, o.ms) for o in ops] == [("MatrixMultiply", 3.0), ("Myelin", 2.0)]
    assert [classify("tensorrt", o.op_type, o.name) for o in ops] == ["matmul", "attention"]
