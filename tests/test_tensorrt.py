"""TensorRT: option rules, the API adapter across generations, and real builds through TensorRT-RTX."""

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from conftest import ZOO, zoo_spec
from vitexport import api
from vitexport.backends.base import ExportOptions
from vitexport.errors import BackendUnavailable, UsageError
from vitexport.sources import SourceSpec
from vitexport.trt import api as trt_api
from vitexport.trt.bundle import trtexec_lines
from vitexport.trt.options import TensorRTOptions, validate

# --- option rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    ({"min_batch": 4, "opt_batch": 2, "max_batch": 8}, "min <= opt <= max"),
    ({"min_batch": 1, "opt_batch": 9, "max_batch": 8}, "min <= opt <= max"),
    ({"min_batch": 0}, "min <= opt <= max"),
    ({"max_batch": 8, "opt_batch": 8, "batch_buckets": (4, 2, 8)}, "rise strictly"),
    ({"max_batch": 8, "opt_batch": 8, "batch_buckets": (2, 4)}, "end at the max batch"),
    ({"dla_core": 0, "precision": "fp16", "max_batch": 4, "opt_batch": 4}, "DLA needs static shapes"),
    ({"dla_core": 0, "precision": "fp32"}, "DLA runs fp16 or int8 only"),
    ({"dla_core": -1, "precision": "fp16"}, "must be >= 0"),
    ({"precision": "int4"}, "precision must be one of"),
    ({"precision": "int8"}, "needs calibration images"),
    ({"builder": "onnx"}, "--builder must be"),
    ({"optimization_level": 7}, "0..5"),
    ({"workspace_mb": 0}, "must be positive"),
    ({"hardware_compatibility": "everything"}, "ampere_plus"),
])
def test_invalid_options_are_refused_before_building(kwargs, message):
    with pytest.raises(UsageError, match=message):
        validate(TensorRTOptions(**kwargs))


def test_dla_needs_a_tensorrt_with_dla():
    with pytest.raises(UsageError, match="no DLA support"):
        validate(TensorRTOptions(dla_core=0, precision="fp16"), has_dla=False)
    validate(TensorRTOptions(dla_core=0, precision="fp16"), has_dla=True)


def test_profiles_one_per_bucket():
    options = TensorRTOptions(min_batch=1, opt_batch=8, max_batch=8, batch_buckets=(1, 4, 8))
    assert options.profiles() == [(1, 1, 1), (2, 4, 4), (5, 8, 8)] and options.dynamic
    assert TensorRTOptions().profiles() == [(1, 1, 1)] and not TensorRTOptions().dynamic


# --- the adapter against both API generations ---------------------------------------------------------


def fake_trt(version: str, precision_flags: bool, explicit_batch: bool):
    class Flag:
        __members__ = {"STRONGLY_TYPED": 1, **({"EXPLICIT_BATCH": 0} if explicit_batch else {})}
        STRONGLY_TYPED = 1
        EXPLICIT_BATCH = 0

    builder_flags = types.SimpleNamespace(**({"FP16": 0, "INT8": 1} if precision_flags else {}), TF32=2)
    module = types.SimpleNamespace(__version__=version, BuilderFlag=builder_flags, NetworkDefinitionCreationFlag=Flag,
                                   MemoryPoolType=types.SimpleNamespace(WORKSPACE="ws"))
    if precision_flags:
        module.IInt8EntropyCalibrator2 = object
    return trt_api.Trt(module, "tensorrt", version)


@pytest.mark.parametrize("version,flags,explicit,expected_net,calibrators", [
    ("8.6.2", True, True, 1 << 0, True),  # JetPack 6.0 era: explicit batch flag still needed
    ("10.3.0", True, True, 0, True),  # TRT 10: explicit batch is implied
    ("11.0.0", False, False, 0, False),  # TRT 11: no precision flags, strongly typed by default of ONNX types
])
def test_adapter_follows_each_generation(version, flags, explicit, expected_net, calibrators):
    trt = fake_trt(version, flags, explicit)
    assert trt.precision_flags is flags and trt.has_calibrators is calibrators
    assert trt_api.network_flags(trt, strongly_typed=False) == expected_net
    assert trt_api.network_flags(trt, strongly_typed=True) == expected_net | (1 << 1)


def test_workspace_uses_memory_pools_or_the_old_attribute():
    calls = {}
    new = types.SimpleNamespace(set_memory_pool_limit=lambda pool, size: calls.update({pool: size}))
    trt_api.set_workspace(fake_trt("10.3.0", True, True), new, 1 << 20)
    assert calls == {"ws": 1 << 20}
    old = types.SimpleNamespace()
    trt_api.set_workspace(fake_trt("8.2.1", True, True), old, 123)
    assert old.max_workspace_size == 123


def test_missing_tensorrt_is_exit_3(monkeypatch):
    import importlib

    real = importlib.import_module

    def no_trt(name, *args):
        if name in trt_api.FLAVOURS.values():
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_trt)
    with pytest.raises(BackendUnavailable, match="no TensorRT here"):
        trt_api.load("auto")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_trtexec_lines_in_both_dialects(precision):
    options = TensorRTOptions(precision=precision, min_batch=1, opt_batch=4, max_batch=8,
                              calibration_images="x" if precision == "int8" else None)
    lines = trtexec_lines(options, "pixel_values", (4, 3, 224, 224))
    assert "--minShapes=pixel_values:1x3x224x224" in lines["tensorrt10"]
    assert "--maxShapes=pixel_values:8x3x224x224" in lines["tensorrt11"]
    assert "--stronglyTyped" in lines["tensorrt11"] and "--fp16" not in lines["tensorrt11"]
    if precision == "fp16":
        assert "--fp16" in lines["tensorrt10"] and "*LayerNormalization*:fp32" in lines["tensorrt10"]
        assert "model.fp16.onnx" in lines["tensorrt11"]


# --- real builds through TensorRT-RTX (no GPU needed) -------------------------------------------------



def rtx_available():
    try:
        trt_api.load("rtx")
    except BackendUnavailable as e:
        pytest.skip(str(e))


def build(out_dir, spec, **trt):
    rtx_available()
    options = ExportOptions(dynamic_batch=trt.get("max_batch", 1) > trt.get("min_batch", 1),
                            extra={"tensorrt": {"builder": "rtx", **trt}, "out_dir": str(out_dir), **trt.pop("extra", {})})
    return api.export("tensorrt", spec, options, out_dir)


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_presets_build_engines_whose_io_matches_the_onnx(out_dir, preset):
    result = build(out_dir, SourceSpec(preset), min_batch=1, opt_batch=4, max_batch=8)
    info = result["info"]
    assert info["io_matches_onnx"] and info["flavour"] == "rtx" and info["engine_bytes"] > 1_000_000
    assert {t["name"]: t["shape"] for t in info["io"]} == {"pixel_values": [-1, 3, 224, 224], "logits": [-1, 1000]}
    assert info["profiles"] == [[1, 4, 8]] and len(info["onnx_sha256"]) == 64
    parity = result["parity"]
    assert parity["passed"] is None and "GPU" in parity["skipped"]  # honest: the engine was not run here


@pytest.mark.parametrize("model", ZOO)
def test_zoo_models_build(out_dir, model):
    result = build(out_dir, SourceSpec(zoo_spec(model)))
    assert result["info"]["io_matches_onnx"]


@pytest.mark.parametrize("precision,built_from", [("fp16", "tiny.fp16.onnx"), ("int8", "tiny.int8-qdq.onnx")])
def test_reduced_precision_builds_from_a_typed_onnx(out_dir, precision, built_from, tmp_path):
    from PIL import Image

    images = tmp_path / "calib"
    images.mkdir()
    for i in range(4):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(images / f"{i}.png")
    result = build(out_dir, SourceSpec("tiny", overrides={"depth": 2}), precision=precision,
                   calibration_images=str(images) if precision == "int8" else None)
    assert result["info"]["built_from"] == built_from and result["precision"] == precision
    if precision == "fp16":
        import onnx

        model = onnx.load(str(out_dir / built_from))
        kept = {n.op_type for n in model.graph.node if n.op_type in ("LayerNormalization", "Softmax")}
        assert kept == {"LayerNormalization"} or kept == {"LayerNormalization", "Softmax"}


def test_the_sidecar_matching_onnx_is_reused(out_dir):
    rtx_available()
    api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), ExportOptions(), out_dir)
    result = build(out_dir, SourceSpec("tiny", overrides={"depth": 1}))
    assert result["info"]["onnx_source"].startswith("reused tiny.onnx")
    other = build(out_dir, SourceSpec("tiny", overrides={"depth": 1}), min_batch=1, opt_batch=2, max_batch=2)
    assert other["info"]["onnx_source"].startswith("exported")  # a dynamic request does not reuse a static ONNX


def test_verify_without_a_gpu_is_exit_3(out_dir):
    result = build(out_dir, SourceSpec("tiny", overrides={"depth": 1}))
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the engine runs")
    with pytest.raises(BackendUnavailable, match="GPU"):
        api.verify(result["artifact"])


def test_jetson_bundle_runs_with_the_onnxruntime_stand_in(out_dir, tmp_path):
    bundle = tmp_path / "jetson"
    build(out_dir, SourceSpec("tiny", overrides={"depth": 2}), min_batch=1, opt_batch=2, max_batch=4,
          extra={"bundle": str(bundle)})
    assert {"model.onnx", "build_engine.sh", "infer.py", "README.md", "reference_input.npy",
            "reference_logits.npy"} <= {p.name for p in bundle.iterdir()}
    script = (bundle / "build_engine.sh").read_text()
    assert "--stronglyTyped" in script and "--minShapes=pixel_values:1x3x224x224" in script
    run = subprocess.run([sys.executable, "infer.py", "--onnx", "model.onnx"], cwd=bundle, capture_output=True, text=True)
    assert run.returncode == 0 and "PASS" in run.stdout
    logits = np.load(bundle / "reference_logits.npy")
    np.save(bundle / "reference_logits.npy", logits + 0.5)  # a wrong reference must fail the check
    run = subprocess.run([sys.executable, "infer.py", "--onnx", "model.onnx"], cwd=bundle, capture_output=True, text=True)
    assert run.returncode == 1 and "FAIL" in run.stdout


@pytest.mark.gpu
def test_engine_matches_pytorch_on_a_gpu(out_dir):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU that TensorRT can run on")
    result = build(out_dir, SourceSpec("tiny"), min_batch=1, opt_batch=2, max_batch=4)
    assert result["parity"]["passed"] is True
