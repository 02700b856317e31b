"""The Jetson bundle: its files, both trtexec dialects, and infer.py run end to end with the ONNX Runtime
stand-in (the engine path needs a device with TensorRT)."""

import json
import os
import re
import stat
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

from vitexport.backends.tensorrt.bundle import trtexec_lines, write_bundle
from vitexport.backends.tensorrt.options import TensorRTOptions

ALL_FILES = {"model.onnx", "build_engine.sh", "infer.py", "README.md", "bundle.json", "reference_input.npy",
             "reference_logits.npy"}


@pytest.fixture(scope="module")
def small_vit(tmp_path_factory):
    """A small torchvision ViT as ONNX (dynamic batch) with PyTorch's logits for a fixed input."""
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                              num_classes=10).eval()
    with torch.no_grad():
        model.heads.head.weight.normal_(0, 0.5)  # torchvision starts the head at zero: logits would all be 0
    path = tmp_path_factory.mktemp("vit") / "vit.onnx"
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings from nn.MultiheadAttention's shape checks
        torch.onnx.export(model, x[:1], str(path), dynamo=False, opset_version=17, input_names=["pixel_values"],
                          output_names=["logits"], dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    with torch.no_grad():
        logits = model(x).numpy()
    return types.SimpleNamespace(path=path, x=x.numpy(), logits=logits)


def bundle(small_vit, folder, **options):
    calibration = options.pop("calibration", None)
    opts = TensorRTOptions(min_batch=1, opt_batch=2, max_batch=4, **options)
    files = write_bundle(folder, small_vit.path, opts, small_vit.x, small_vit.logits, "pixel_values", "logits",
                         calibration=calibration)
    return set(files)


def infer(folder, *args, cwd=None):
    # -I: isolated mode, so the script cannot lean on vitexport or the test's paths.
    return subprocess.run([sys.executable, "-I", str(folder / "infer.py"), *args], cwd=cwd or folder,
                          capture_output=True, text=True, timeout=120)


def test_infer_passes_with_the_onnxruntime_stand_in_and_fails_on_altered_logits(small_vit, tmp_path):
    folder = tmp_path / "jetson"
    assert bundle(small_vit, folder) == ALL_FILES
    run = infer(folder, "--onnx", str(folder / "model.onnx"), cwd=tmp_path)  # from another folder too
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS" in run.stdout and "ONNX Runtime CPUExecutionProvider" in run.stdout
    reference = np.load(folder / "reference_logits.npy")
    altered = reference.copy()
    altered[0, 3] += 0.01  # one logit off by more than the fp32 tolerance
    np.save(folder / "reference_logits.npy", altered)
    run = infer(folder, "--onnx", "model.onnx")
    assert run.returncode == 1 and "FAIL" in run.stdout
    np.save(folder / "reference_logits.npy", reference[:1])  # a shape mismatch fails too
    run = infer(folder, "--onnx", "model.onnx")
    assert run.returncode == 1 and "output shape" in run.stdout


def test_infer_is_standalone(small_vit, tmp_path):
    folder = tmp_path / "jetson"
    bundle(small_vit, folder)
    script = (folder / "infer.py").read_text()
    assert "vitexport" not in script and not re.search(r"@[A-Z0-9_]+@", script)  # every placeholder filled
    assert "INPUT_NAME, OUTPUT_NAME = 'pixel_values', 'logits'" in script
    assert os.stat(folder / "infer.py").st_mode & stat.S_IXUSR
    manifest = json.loads((folder / "bundle.json").read_text())
    assert manifest["batch_range"] == [1, 4] and manifest["input_shape"] == ["batch", 3, 32, 32]


def test_fp16_bundle_carries_both_dialects(small_vit, tmp_path):
    folder = tmp_path / "jetson"
    files = bundle(small_vit, folder, precision="fp16")
    assert files == ALL_FILES | {"model.fp16.onnx"}
    manifest = json.loads((folder / "bundle.json").read_text())
    weak, strong = manifest["trtexec"]["tensorrt10"], manifest["trtexec"]["tensorrt11"]
    # TensorRT 8.6/10: precision flags, LayerNorm/Softmax pinned to fp32 by their exact layer names.
    assert "--fp16" in weak and "--precisionConstraints=obey" in weak and "--onnx=model.onnx" in weak
    assert "/encoder/layers/encoder_layer_0/ln_1/LayerNormalization:fp32" in weak
    assert "/encoder/layers/encoder_layer_1/self_attention/Softmax:fp32" in weak
    assert len(manifest["fp32_layers"]) == 7
    # TensorRT 11: strongly typed, no precision flags, the fp16 ONNX carries the precision.
    assert "--stronglyTyped" in strong and "--onnx=model.fp16.onnx" in strong
    assert "--fp16" not in strong and "--int8" not in strong
    assert "--minShapes=pixel_values:1x3x32x32" in strong and "--maxShapes=pixel_values:4x3x32x32" in weak
    readme = (folder / "README.md").read_text()
    assert "LayerNormalization, Softmax kept in fp32" in readme and "scp -r jetson" in readme


@pytest.mark.parametrize("major,expected", [("10", "--fp16"), ("8", "--fp16"), ("11", "--stronglyTyped")])
def test_build_script_picks_the_dialect_of_the_installed_tensorrt(small_vit, tmp_path, major, expected):
    folder = tmp_path / "jetson"
    bundle(small_vit, folder, precision="fp16")
    fake = tmp_path / "trtexec"
    fake.write_text("#!/usr/bin/env bash\necho \"trtexec $*\"\n")
    fake.chmod(0o755)
    run = subprocess.run(["bash", str(folder / "build_engine.sh")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TRTEXEC": str(fake), "TRT_MAJOR": major})
    assert run.returncode == 0, run.stderr
    command = next(line for line in run.stdout.splitlines() if line.startswith("trtexec "))
    assert expected in command and "--saveEngine=model.engine" in command
    missing = subprocess.run(["bash", str(folder / "build_engine.sh")], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "TRTEXEC": str(tmp_path / "absent"), "TRT_MAJOR": major})
    assert missing.returncode == 2 and "trtexec not found" in missing.stderr


def test_int8_bundle_quantises_from_calibration_inputs(small_vit, tmp_path):
    folder = tmp_path / "jetson"
    files = bundle(small_vit, folder, precision="int8", calibration=small_vit.x)
    assert "model.int8-qdq.onnx" in files
    lines = json.loads((folder / "bundle.json").read_text())["trtexec"]
    assert "--onnx=model.int8-qdq.onnx" in lines["tensorrt10"] and "--int8" in lines["tensorrt10"]
    assert "--onnx=model.int8-qdq.onnx" in lines["tensorrt11"] and "--int8" not in lines["tensorrt11"]
    from vitexport.errors import UsageError

    with pytest.raises(UsageError, match="needs a QDQ ONNX or calibration"):
        bundle(small_vit, tmp_path / "other", precision="int8")


@pytest.mark.parametrize("options,flags", [
    ({"dla_core": 1, "precision": "fp16", "max_batch": 1, "opt_batch": 1}, ["--useDLACore=1", "--allowGPUFallback"]),
    ({"version_compatible": True, "hardware_compatibility": "ampere_plus"},
     ["--versionCompatible", "--hardwareCompatibilityLevel=ampere+"]),
    ({"optimization_level": 5, "workspace_mb": 512}, ["--builderOptimizationLevel=5", "--memPoolSize=workspace:512M"]),
])
def test_trtexec_lines_follow_the_options(options, flags):
    lines = trtexec_lines(TensorRTOptions(**options), "pixel_values", (1, 3, 224, 224))
    for flag in flags:
        assert flag in lines["tensorrt10"] and flag in lines["tensorrt11"]
    assert "--minShapes" not in lines["tensorrt10"]  # a static batch needs no shapes


def test_fp32_bundle_keeps_fp32_exact():
    lines = trtexec_lines(TensorRTOptions(min_batch=1, opt_batch=4, max_batch=8, batch_buckets=(4, 8)),
                          "pixel_values", (1, 3, 224, 224))
    assert "--noTF32" in lines["tensorrt10"] and "--fp16" not in lines["tensorrt10"]
    # trtexec builds one profile: the bundle spans the buckets' whole range.
    assert "--minShapes=pixel_values:1x3x224x224" in lines["tensorrt11"]
    assert "--maxShapes=pixel_values:8x3x224x224" in lines["tensorrt11"]


def test_bundle_through_export(out_dir, tmp_path):
    """`vitexport tensorrt --bundle`: the bundle holds the project's verified ONNX and PyTorch's logits."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    from vitexport import api
    from vitexport.sources import SourceSpec

    folder = tmp_path / "jetson"
    options = TensorRTOptions(dynamic_batch=True, builder="rtx", precision="fp16", min_batch=1, opt_batch=2,
                              max_batch=4, bundle=str(folder))
    result = api.export("tensorrt", SourceSpec("tiny", overrides={"depth": 2}), options, out_dir)
    assert result["info"]["bundle"]["folder"] == str(folder.resolve())
    assert ALL_FILES | {"model.fp16.onnx"} <= {p.name for p in folder.iterdir()}
    assert "--minShapes=pixel_values:1x3x224x224" in (folder / "build_engine.sh").read_text()
    run = infer(folder, "--onnx", "model.onnx")
    assert run.returncode == 0 and "PASS" in run.stdout
