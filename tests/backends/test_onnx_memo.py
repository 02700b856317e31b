"""ONNX exports of one loaded model (optimize's fp32, slimmed and int8 candidates) trace it once and
slim the traced graph once: the graph's bytes are kept in the model's memo."""

from __future__ import annotations

from vitexport.export import pipeline
from vitexport.models import sources
from vitexport.models.sources import SourceSpec

SPEC = SourceSpec("tiny", overrides={"depth": 1})


def test_onnx_exports_of_one_loaded_model_trace_and_slim_it_once(out_dir, monkeypatch):
    from vitexport.backends.onnx import export as onnx_export
    from vitexport.backends.onnx import optimize as onnx_optimize
    from vitexport.backends.onnx.options import OnnxOptions

    traced, slimmed = [], []
    trace, slim = onnx_export._torch_export, onnx_optimize.OPTIMIZERS["slim"]
    monkeypatch.setattr(onnx_export, "_torch_export", lambda *a: traced.append(1) or trace(*a))
    monkeypatch.setitem(onnx_optimize.OPTIMIZERS, "slim", lambda *a: slimmed.append(1) or slim(*a))
    loaded = sources.load(SPEC)
    results = [pipeline.export("onnx", SPEC, OnnxOptions(dynamic_batch=True, **extra), out_dir, name=name,
                               loaded=loaded)
               for name, extra in (("fp32", {}), ("slim", {"optimize": "slim"}), ("int8", {"precision": "int8"}))]
    assert all(r["parity"]["passed"] for r in results)
    assert len(traced) == 1 and len(slimmed) == 1
    other = pipeline.export("onnx", SPEC, OnnxOptions(dynamic_batch=False), out_dir, name="static", loaded=loaded)
    assert other["parity"]["passed"] and len(traced) == 2  # another graph is traced anew


def test_an_int8_export_again_with_the_same_settings_quantises_once(out_dir, monkeypatch):
    """optimize publishes its pick by exporting it again under the final name: the quantised graph
    comes from the memo; other settings quantise anew."""
    from vitexport.backends.onnx_common import quantize
    from vitexport.backends.onnx.options import OnnxOptions

    quantised = []
    real = quantize.quantize_for_ort
    monkeypatch.setattr(quantize, "quantize_for_ort", lambda *a, **kw: quantised.append(1) or real(*a, **kw))
    loaded = sources.load(SPEC)
    first, again = (pipeline.export("onnx", SPEC, OnnxOptions(precision="int8"), out_dir, name=name, loaded=loaded)
                    for name in ("int8", "published"))
    assert first["parity"]["passed"] and again["parity"]["passed"] and len(quantised) == 1
    assert (out_dir / "int8.onnx").read_bytes() == (out_dir / "published.onnx").read_bytes()
    pipeline.export("onnx", SPEC, OnnxOptions(precision="int8", per_channel=False), out_dir, name="per-tensor",
                    loaded=loaded)
    assert len(quantised) == 2


def test_optimizes_slimmed_candidate_is_the_slimmed_graph_even_where_slimming_measures_no_faster(out_dir,
                                                                                                monkeypatch):
    """`--optimize slim` times the slimmed graph against the exported one and keeps the exported one
    unless slimming is faster; optimize's candidate skips that timing (its benchmark times both)."""
    from vitexport import backends
    from vitexport.backends.onnx import optimize as onnx_optimize

    timed = []
    monkeypatch.setattr(onnx_optimize, "speedup", lambda *a, **kw: timed.append(1) or 0.5)
    candidate = next(c for c in backends.get("onnx").candidates("cpu", None) if c.label == "fp32-slim")
    loaded = sources.load(SPEC)
    plain = pipeline.export("onnx", SPEC, candidate.options.__class__(dynamic_batch=True, optimize="slim"), out_dir,
                            name="asked", loaded=loaded)
    assert len(timed) == 1  # measured slower: the exported graph is kept, and the sidecar says so
    slimmed = pipeline.export("onnx", SPEC, candidate.options, out_dir, name="candidate", loaded=loaded)
    assert len(timed) == 1 and plain["parity"]["passed"] and slimmed["parity"]["passed"]
    nodes = {name: sidecar_info(out_dir / f"{name}.onnx")["node_count"] for name in ("asked", "candidate")}
    assert nodes["candidate"] < nodes["asked"]


def sidecar_info(path):
    from vitexport.export import sidecar

    return sidecar.read(path).info
