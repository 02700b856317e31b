"""Every supported Hugging Face architecture (tests/hf_tiny.py), tiny, through every backend: each
artifact keeps the model's output names and matches PyTorch on every output; TensorRT-RTX builds an
engine from each verified ONNX. A base-size ViT checks parity at full size."""

import dataclasses
import os
from pathlib import Path

import pytest

from vitexport import api, backends
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.core.errors import UnsupportedByRuntime
from vitexport.export import sidecar
from vitexport.models.hf.architectures import ARCHITECTURES
from vitexport.models.sources import SourceSpec

ARCHS = sorted(ARCHITECTURES)
# A dual checkpoint's vision tower loads as another entry's class (CLIPModel as CLIPVisionModelWithProjection):
# its loading is tested for ONNX; tracing and converting that class again would test nothing new.
OWN_CLASS = [name for name in ARCHS if not ARCHITECTURES[name].loads_as]
DIRECT = [be.name for be in backends.exporters() if be.builds_from is None and be.name != "onnx"]
# ExecuTorch's lowering takes ~10 s even for a tiny model, and what it lowers is the encoder's ops: it
# skips the classes whose encoder another class of the same modeling family brings too, with another
# head on top (a Linear, a pooler); a new architecture is lowered by default. Depth Anything is DINOv2's
# encoder under DPT's neck and head, both lowered with their own classes; YOLOS is ViT's encoder with
# two MLP heads; ViT MSN's modules are ViT's, line for line (only their initialisation differs), with
# ViTForImageClassification's head.
SAME_ENCODER = {"executorch": {"CLIPVisionModel", "DeiTForImageClassification", "Dinov2Model", "ViTModel",
                               "DepthAnythingForDepthEstimation", "YolosForObjectDetection",
                               "ViTMSNForImageClassification"}}
# What a backend cannot convert yet, and the refusal that says so: Mask2Former's deformable attention
# (and RT-DETR's) indexes its sampling points with a rank-6 tensor, beyond Core ML's rank 5.
CANNOT = {("coreml", arch): r"makes a rank-6 tensor .* Core ML allows rank <= 5"
          for arch in ("Mask2FormerForUniversalSegmentation", "RTDetrForObjectDetection")}
# OpenVINO's CPU plugin crashes (SIGSEGV at inference) on MobileViTV2, at every width tried, when oneDNN
# is held to AVX2 on a CPU that has AVX-512: its own kernels still choose AVX-512 (the crashing instruction
# is EVEX-encoded). A CPU without AVX-512 has no such mix; there the case runs.
HELD_TO_AVX2 = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper().startswith("AVX2") and " avx512f" in (
    Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else "")
MIXED_ISA_CRASH = {("openvino", "MobileViTV2ForSemanticSegmentation")}
# The dynamo exporter where it is most fragile: BEiT without its frozen bias, SigLIP's single-query attention
# pooling (a reshape to [1, batch, d] that must not be taken for a baked batch). The legacy one runs first by default.
DYNAMO = [name for name in ARCHS if "beit-relative-position-bias" in ARCHITECTURES[name].freezes]
DYNAMO.append("SiglipVisionModel")


def expected_outputs(arch: str) -> list[str]:
    """Names the artifacts give the outputs: the model's fields (every tiny model fills all of its
    entry's), a lone `logits` staying --output-name's default."""
    return list(ARCHITECTURES[arch].outputs)


def export(backend, spec, out_dir, **options):
    be = backends.get(backend)
    if not be.availability().ok:
        pytest.skip(f"{backend}: {be.availability().reason}")
    if "precision" in {f.name for f in dataclasses.fields(be.Options)}:
        options["precision"] = "fp32"  # these tests hold every backend to fp32 parity
    return api.export(backend, spec, be.Options(**options), out_dir)


def check(result, arch: str, batches: list[int]) -> None:
    parity = result["parity"]
    assert parity["passed"], parity["failures"]
    assert parity["batches"] == batches and parity["max_abs_error"] < 1e-4
    assert {c["output"] for c in parity["checks"]} == set(expected_outputs(arch))  # every output compared
    task = ARCHITECTURES[arch].task  # a depth map judged as one, never by top-1
    assert parity["task"] == task and (task == "classification" or parity["task_metrics"])
    numbers = parity.get("task_metrics") or {}
    if task == "embedding":  # both numbers, whatever the batch: a feature map's positions, or several feeds
        assert all(v is not None for v in numbers.values()), numbers
    if task == "detection":  # on any weights and input, PyTorch's top-k queries are compared
        assert numbers["topk_agreement"] is not None, numbers
    record = sidecar.read(result["artifact"])
    assert record.output_names == expected_outputs(arch)
    assert record.source.kind == "hf" and len(record.source.weights_sha256) == 64
    assert any(f"attn_implementation={ARCHITECTURES[arch].attention}" in note for note in record.source.notes)
    for freeze in ARCHITECTURES[arch].freezes:  # every freeze is said, never silent
        family = freeze.split("-")[0]
        assert any(note.lower().startswith(family) and ("frozen" in note or "rewritten" in note)
                   for note in record.source.notes), freeze


@pytest.mark.parametrize("arch", ARCHS)
def test_onnx_matches_pytorch_and_tensorrt_rtx_builds_from_it(hf_dir, arch, out_dir):
    from vitexport.backends.tensorrt.options import TensorRTOptions

    spec = SourceSpec(f"hf:{hf_dir(arch)}")
    engine = TensorRTOptions(builder="rtx", dynamic_batch=True)
    onnx = api.export("onnx", spec, backends.get("tensorrt").upstream_options(engine), out_dir)
    check(onnx, arch, [1, 3, 8])
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    info = api.export("tensorrt", spec, engine, out_dir)["info"]
    assert info["onnx_source"].startswith("reused") and info["io_matches_onnx"] and info["engine_bytes"] > 0
    assert [t["name"] for t in info["io"] if t["mode"] == "output"] == expected_outputs(arch)
    assert info["profiles"] == [[1, 8, 8]]


@pytest.mark.parametrize("backend,arch", [(backend, arch) for arch in OWN_CLASS for backend in DIRECT
                                          if arch not in SAME_ENCODER.get(backend, ())])
def test_torchscript_and_coreml_match_pytorch_on_every_output(hf_dir, arch, backend, out_dir):
    spec = SourceSpec(f"hf:{hf_dir(arch)}")
    if HELD_TO_AVX2 and (backend, arch) in MIXED_ISA_CRASH:
        pytest.skip("OpenVINO crashes on this model when oneDNN is held to AVX2 on an AVX-512 CPU (see MIXED_ISA_CRASH)")
    if (backend, arch) in CANNOT:  # refused as unavailable (exit 3), naming what stops it; never a wrong artifact
        with pytest.raises(UnsupportedByRuntime, match=CANNOT[backend, arch]):
            export(backend, spec, out_dir)
        return
    check(export(backend, spec, out_dir), arch, [1])


@pytest.mark.parametrize("arch", DYNAMO)
def test_the_dynamo_exporter_too(hf_dir, arch, out_dir):
    result = api.export("onnx", SourceSpec(f"hf:{hf_dir(arch)}"), OnnxOptions(exporter="dynamo", dynamic_batch=True),
                        out_dir)
    assert result["info"]["exporter"] == "dynamo" and result["parity"]["passed"], result["parity"]["failures"]


@pytest.mark.parametrize("arch,layout", [("Dinov2ForImageClassification", "RGB"),
                                         ("MobileViTForSemanticSegmentation", "BGR")])
def test_coreml_image_input_takes_the_processors_8_bit_pixels(hf_dir, out_dir, arch, layout):
    """--image-input folds the processor's rescale and normalisation (DINOv2's: ImageNet mean/std) into
    the program: the processor's resized, cropped 8-bit image goes in, PyTorch's logits on the
    processor's full output come out. MobileViT takes BGR: the image input says so, and Core ML hands
    the program the image's planes in that order."""
    import coremltools as ct

    import numpy as np
    import torch
    import transformers
    from PIL import Image

    from vitexport.backends.coreml_common.mil_eval import load_program
    from vitexport.models.sources import load

    folder = hf_dir(arch)
    result = export("coreml", SourceSpec(f"hf:{folder}"), out_dir, image_input=True)
    assert result["parity"]["passed"] and result["info"]["image_input"]
    spec = ct.models.MLModel(result["artifact"], skip_model_load=True).get_spec()
    assert spec.description.input[0].type.imageType.colorSpace == getattr(ct.proto.FeatureTypes_pb2.ImageFeatureType,
                                                                           layout)
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    image = next((Path(__file__).resolve().parents[2] / "samples" / "images").glob("*.jpg"))
    with Image.open(image) as im:
        eight_bit = processor(im, do_rescale=False, do_normalize=False, return_tensors="np").pixel_values
        normalised = processor(im, return_tensors="np").pixel_values
    assert eight_bit.dtype == np.uint8
    with torch.no_grad():
        want = load(SourceSpec(f"hf:{folder}")).model(torch.from_numpy(normalised)).numpy()
    got = load_program(Path(result["artifact"])).run({"pixel_values": eight_bit.astype(np.float32)})["logits"]
    assert np.abs(got - want).max() < 1e-4


def test_bench_and_verify_from_the_sidecar_alone(hf_dir, out_dir, tmp_path):
    """Another machine has the artifact, its sidecar and the same model directory: nothing else."""
    import shutil

    result = export("onnx", SourceSpec(f"hf:{hf_dir('ViTModel')}"), out_dir, dynamic_batch=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in (result["artifact"], result["sidecar"]):
        shutil.copy(path, elsewhere)
    artifact = elsewhere / Path(result["artifact"]).name
    assert api.verify(artifact)["parity"]["passed"]
    report = api.bench(None, ["torch", "onnxruntime"], [2], artifacts=[artifact], iters=2, warmup_iters=1,
                       warmup_s=0, roofline=False, out_dir=tmp_path / "bench")
    rows = {r["backend"]: r for r in report["results"]}
    assert rows["torch"]["available"] and rows["onnxruntime"]["available"], rows
    assert report["model"] == f"hf:{hf_dir('ViTModel')}"


@pytest.mark.slow
def test_base_size_vit_matches_pytorch_at_batch_1_and_8(tmp_path, out_dir):
    pytest.importorskip("transformers")
    import transformers as T
    from hf_tiny import save_tiny

    config = T.ViTConfig(num_labels=1000)  # ViT-B/16 at 224, randomly initialised
    folder = save_tiny("ViTForImageClassification", tmp_path / "vit-base", config=config, processor=False)
    T.ViTImageProcessor().save_pretrained(folder)  # google/vit-base-patch16-224's: 224x224, mean/std 0.5
    result = export("onnx", SourceSpec(f"hf:{folder}"), out_dir, dynamic_batch=True)
    assert result["parity"]["passed"], result["parity"]["failures"]
    assert result["parity"]["batches"] == [1, 3, 8] and result["input_shape"] == ["batch", 3, 224, 224]
