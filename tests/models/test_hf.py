"""hf:DIR: loading a save_pretrained folder offline, the outputs by name, exact export-time freezes, the
image processor reproduced, and one-line refusals of what vitexport cannot export."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hf_tiny import CHANNELS, IMAGE, SIZES, TINY, save_tiny
from typer.testing import CliRunner

from vitexport import api
from vitexport.cli.app import app
from vitexport.core.environment import sha256_file
from vitexport.core.errors import SourceError, WeightsError
from vitexport.models.hf.architectures import ARCHITECTURES
from vitexport.models.hf.processor import SUPPORTED, TRIMAP
from vitexport.models.sources import SourceSpec, load

transformers = pytest.importorskip("transformers")

ARCHS = sorted(ARCHITECTURES)
IMAGES = sorted((Path(__file__).resolve().parents[2] / "samples" / "images").glob("*.jpg"))


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_every_supported_architecture_has_a_tiny_model_to_test():
    assert set(TINY) == set(ARCHITECTURES)


def reference_outputs(arch: str, folder: Path, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What transformers itself computes for the folder, no vitexport involved (no freezes)."""
    T = transformers
    with torch.no_grad():
        if arch == "CLIPModel":  # the vision tower of the dual model, and its projection
            full = T.CLIPModel.from_pretrained(folder).eval()
            vision = full.vision_model(pixel_values=x)
            return {"image_embeds": full.visual_projection(vision.pooler_output),
                    "last_hidden_state": vision.last_hidden_state}
        if arch == "SamModel":  # the image encoder of the whole SAM
            return dict(T.SamModel.from_pretrained(folder).eval().vision_encoder(pixel_values=x))
        if arch == "SiglipModel":
            return dict(T.SiglipModel.from_pretrained(folder).eval().vision_model(pixel_values=x))
        return dict(getattr(T, arch).from_pretrained(folder).eval()(pixel_values=x))


@pytest.mark.parametrize("arch", ARCHS)
def test_loaded_model_computes_what_transformers_computes(hf_dir, arch):
    """Freezes included: a frozen constant is the value the model recomputed each forward. Not bit for
    bit: SigLIP's pooling head runs nn.MultiheadAttention, whose fused and unfused paths sum in other
    orders on some CPUs' kernels (3e-7 apart on an AMD EPYC, equal on a Xeon); a wrong freeze or a
    missed layer moves outputs by orders of magnitude more than this float32 rounding."""
    folder = hf_dir(arch)
    loaded = load(SourceSpec(f"hf:{folder}"))
    fields = list(ARCHITECTURES[arch].outputs)
    channels, size = CHANNELS.get(arch, 3), SIZES.get(arch, IMAGE)
    assert loaded.kind == "hf" and loaded.input_shape == (1, channels, size, size) and loaded.name == folder.name
    assert loaded.output_names == (None if fields == ["logits"] else fields)
    assert loaded.weights_sha256 == sha256_file(folder / "model.safetensors")
    assert loaded.notes[0].startswith(f"{arch} loaded with transformers")
    assert f"attn_implementation={ARCHITECTURES[arch].attention}" in loaded.notes[0]
    x = torch.randn(2, channels, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = loaded.model(x)
    ours = dict(zip(fields, ours if isinstance(ours, tuple) else (ours,)))
    want = reference_outputs(arch, folder, x)
    for name in fields:
        torch.testing.assert_close(ours[name], want[name], rtol=1e-5, atol=1e-6, msg=name)
    frozen = [n for n in loaded.notes if "frozen" in n or "rewritten" in n]
    assert len(frozen) == len(ARCHITECTURES[arch].freezes)


def test_freezes_are_what_makes_beit_and_dinov2_convert(hf_dir):
    """The frozen modules no longer run the ops the exporters fail on (kept in buffers, not weights)."""
    beit = load(SourceSpec(f"hf:{hf_dir('BeitForImageClassification')}")).model
    biases = [m for m in beit.modules() if type(m).__name__ == "BeitRelativePositionBias"]
    assert len(biases) == 2 and all(b.frozen_bias.shape == (1, 2, 17, 17) for b in biases)  # heads, 1 + 4x4 tokens
    assert "frozen_bias" not in "".join(beit.state_dict())  # a buffer, not something a checkpoint must hold
    dino = load(SourceSpec(f"hf:{hf_dir('Dinov2Model')}")).model
    embeddings = dino.model.embeddings
    assert embeddings.position_embeddings.shape[1] == 1 + 7 * 7  # trained grid
    assert embeddings.frozen_position_embeddings.shape[1] == 1 + 4 * 4  # the export's grid


def test_nothing_reaches_the_network_and_the_environment_is_restored(hf_dir, monkeypatch):
    import os
    import socket

    folder = hf_dir("ViTForImageClassification")

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert load(SourceSpec(f"hf:{folder}")).weights_sha256
    assert "HF_HUB_OFFLINE" not in os.environ


# --- preprocessing: vitexport's pixels are the image processor's -------------------------------------


def max_difference(folder: Path, loaded, images) -> float:
    """Largest |vitexport - transformers' default image processor| over the images."""
    from PIL import Image

    from vitexport.verify.feeds import preprocess

    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    worst = 0.0
    for path in images:
        ours = preprocess(path, loaded.preprocessing, loaded.input_shape)
        with Image.open(path) as im:
            theirs = processor(im, return_tensors="np").pixel_values[0]
        assert ours.shape == theirs.shape and ours.dtype == np.float32
        worst = max(worst, float(np.abs(ours - theirs).max()))
    return worst


@pytest.mark.parametrize("arch", ARCHS)
def test_preprocessing_equals_the_models_image_processor(hf_dir, arch):
    folder = hf_dir(arch)
    loaded = load(SourceSpec(f"hf:{folder}"))
    steps = loaded.preprocessing["processor"]
    assert steps["backend"] == "torchvision" and steps["from"] == "preprocessor_config.json"
    if steps["class"] in TRIMAP:
        assert trimap_difference(folder, loaded) <= 1e-6
    else:
        assert max_difference(folder, loaded, IMAGES) <= 1e-6


def trimap_difference(folder: Path, loaded) -> float:
    """ViTMatte's processor on 8-bit pixels and a trimap, against vitexport's recorded normalisation of
    its four channels (seeded inputs are made with it): the trimap rescaled, not normalised."""
    from vitexport.verify.feeds import random_pixels

    rng = np.random.default_rng(0)
    _, channels, height, width = loaded.input_shape
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    trimap = rng.choice(np.array([0, 128, 255], dtype=np.uint8), (height, width))
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    theirs = processor(images=image, trimaps=trimap, return_tensors="np").pixel_values[0]
    unit = np.concatenate([image.transpose(2, 0, 1), trimap[None]]).astype(np.float64) / 255
    mean, std = (np.asarray(loaded.preprocessing[k]).reshape(-1, 1, 1) for k in ("mean", "std"))
    assert theirs.shape == (channels, height, width) and len(mean) == channels
    assert random_pixels((1, channels, 2, 2), 0, loaded.preprocessing["mean"], loaded.preprocessing["std"]).std() > 0
    return float(np.abs((unit - mean) / std - theirs).max())


# Processors whose defaults are not one fixed size (SegFormer's 512, MobileViT's crop beyond its resize, SAM's 1024,
# Mask2Former's shorter side 800 and longer 1333, RT-DETR's 640, YOLOS's padded shorter side 800, DPT's
# aspect-keeping 384), at the fixed size a deployed model of theirs takes; their defaults are refused (HF_BAD).
AT_224 = {"DPTImageProcessor": dict(size={"height": 224, "width": 224}, keep_aspect_ratio=False, ensure_multiple_of=1),
          "SegformerImageProcessor": dict(size={"height": 224, "width": 224}),
          "YolosImageProcessor": dict(size={"height": 224, "width": 224}),  # do_pad as saved by default:
          "DetrImageProcessor": dict(size={"height": 224, "width": 224}),  # at one size it pads nothing
          "Mask2FormerImageProcessor": dict(size={"height": 224, "width": 224}),
          "RTDetrImageProcessor": dict(size={"height": 224, "width": 224}),
          "SamImageProcessor": dict(size={"longest_edge": 224}, pad_size={"height": 224, "width": 224}),
          "MobileViTImageProcessor": dict(size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224})}


@pytest.mark.parametrize("processor", [p for p in SUPPORTED if p not in TRIMAP])  # ViTMatte's: above
def test_published_processor_settings_at_224_match_too(tmp_path, processor):
    """Each processor with its own defaults (224 crops, shorter side 224/256, bilinear or bicubic), as the
    published checkpoints ship them, on a ViT that takes 224x224."""
    folder = save_tiny("ViTModel", tmp_path, processor=False, config=transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=224,
        patch_size=32))
    getattr(transformers, processor)(**AT_224.get(processor, {})).save_pretrained(folder)
    loaded = load(SourceSpec(f"hf:{folder}"))
    assert loaded.input_shape == (1, 3, 224, 224) and loaded.preprocessing["processor"]["class"] == processor
    assert max_difference(folder, loaded, IMAGES) <= 1e-6


def test_grey_palette_and_transparent_images_match_a_converting_processor(hf_dir, tmp_path):
    """CLIP's processor converts to RGB itself, compositing transparency onto white."""
    from PIL import Image

    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, (40, 50, 4), dtype=np.uint8)
    rgba[..., 3] = np.linspace(0, 255, 50, dtype=np.uint8)[None]
    odd = {"grey.png": Image.fromarray(rng.integers(0, 256, (40, 50), dtype=np.uint8), "L"),
           "alpha.png": Image.fromarray(rgba, "RGBA"),
           "palette.png": Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).convert("P")}
    for name, im in odd.items():
        im.save(tmp_path / name)
    folder = hf_dir("CLIPVisionModel")
    loaded = load(SourceSpec(f"hf:{folder}"))
    assert max_difference(folder, loaded, sorted(tmp_path.glob("*.png"))) <= 1e-6


def test_without_a_processor_the_architectures_default_class_is_used_at_the_config_size(tmp_path):
    folder = save_tiny("DeiTForImageClassification", tmp_path, processor=False)
    loaded = load(SourceSpec(f"hf:{folder}"))
    steps = loaded.preprocessing["processor"]
    assert steps["class"] == "DeiTImageProcessor" and "no preprocessor_config.json" in steps["from"]
    assert steps["center_crop"] == {"height": 32, "width": 32} and loaded.input_shape == (1, 3, 32, 32)


def test_rescale_and_normalisation_fold_into_unit_mean_and_std():
    from vitexport.models.hf.processor import unit_normalisation

    assert unit_normalisation(1 / 255, [0.5] * 3, [0.25] * 3) == ([0.5] * 3, [0.25] * 3)
    mean, std = unit_normalisation(1.0, [127.5] * 3, [51.0] * 3)  # a processor that normalises 0-255 pixels
    assert mean == pytest.approx([0.5] * 3) and std == pytest.approx([0.2] * 3)
    assert unit_normalisation(1 / 255, None, None) == ([0.0] * 3, [1.0] * 3)


# --- the CLI: what users see ---------------------------------------------------------------------------


def test_cli_reports_the_processor_it_followed_on_images(hf_dir, tmp_path):
    folder = hf_dir("Dinov2ForImageClassification")
    result = invoke("onnx", "--model", f"hf:{folder}", "--images", IMAGES[0].parent, "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert f"images: {len(IMAGES)}" in result.stdout
    assert "preprocessing: BitImageProcessor (transformers' default torchvision backend): resize to shorter side 36" \
        in " ".join(result.stdout.split())
    assert "DINOv2 position embeddings resized from 49 to 16 patches" in " ".join(result.stdout.split())
    record = json.loads((tmp_path / f"{folder.name}.onnx.json").read_text())
    assert record["source"]["preprocessing"]["processor"]["class"] == "BitImageProcessor"
    assert record["source"]["spec"]["model"] == f"hf:{folder}"


def test_verify_notices_a_changed_model_directory(hf_dir, tmp_path):
    folder = shutil.copytree(hf_dir("ViTForImageClassification"), tmp_path / "vit")
    result = api.export("onnx", SourceSpec(f"hf:{folder}"), None, tmp_path / "out")
    assert api.verify(result["artifact"])["parity"]["passed"]
    save_tiny("ViTForImageClassification", folder, seed=1)  # other weights, same architecture
    with pytest.raises(WeightsError, match="model.safetensors changed since export"):
        api.verify(result["artifact"])


def folder_with(tmp_path: Path, hf_dir, arch="ViTForImageClassification", edit=None) -> Path:
    folder = shutil.copytree(hf_dir(arch), tmp_path / "model")
    if edit:
        edit(folder)
    return folder


def set_config(key, value, file="config.json"):
    def edit(folder):
        data = json.loads((folder / file).read_text())
        data[key] = value
        (folder / file).write_text(json.dumps(data))
    return edit


def processor_file(**data):
    def edit(folder):
        (folder / "preprocessor_config.json").write_text(json.dumps(data))
    return edit


HF_BAD = [
    # (edit of a copied tiny ViT folder, extra CLI args, message fragment)
    (set_config("architectures", ["ConvNextForImageClassification"]), [],
     "architecture ConvNextForImageClassification is not supported"),
    (set_config("architectures", None), [], "names no architecture"),
    (lambda f: (f / "config.json").write_text("{broken"), [], "config.json: it is not readable JSON"),
    (lambda f: (f / "config.json").unlink(), [], "no config.json"),
    (lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"), [], "has no model.safetensors"),
    (lambda f: (f / "model.safetensors").write_bytes(b"garbage"), [], "model.safetensors is not a safetensors file"),
    (set_config("architectures", ["ViTModel"]), [], "does not fit ViTModel; missing: pooler.dense.bias"),
    (set_config("image_processor_type", "ConvNextImageProcessor", "preprocessor_config.json"), [],
     "image processor ConvNextImageProcessor is not one vitexport reproduces"),
    (set_config("size", {"height": 48, "width": 48}, "preprocessor_config.json"), [],
     "does not take a 48x48 input"),
    (processor_file(image_processor_type="DPTImageProcessor", size={"height": 32, "width": 32},
                    keep_aspect_ratio=True, ensure_multiple_of=14), [],
     "DPTImageProcessor keeps the aspect ratio (keep_aspect_ratio=True), so its output size depends on the image"),
    (processor_file(image_processor_type="DPTImageProcessor", size={"height": 32, "width": 32}, ensure_multiple_of=14),
     [], "rounds the size to a multiple of 14 (ensure_multiple_of=14)"),
    (processor_file(image_processor_type="YolosImageProcessor", size={"shortest_edge": 32, "longest_edge": 64}), [],
     "YolosImageProcessor pads images (do_pad), which vitexport does not reproduce: save it at one size"),
    (processor_file(image_processor_type="DetrImageProcessor", size={"height": 32, "width": 32},
                    pad_size={"height": 48, "width": 48}), [],
     "DetrImageProcessor pads images (do_pad), which vitexport does not reproduce: save it at one size"),
    # what a config asks for is known before anything is built: absurd depth, far more than the weights hold
    (set_config("num_hidden_layers", 100_000), [], "config.json asks for 100,000 layers (num_hidden_layers)"),
    (set_config("hidden_size", 8192), [], "parameters and the weights hold"),
    (None, ["--weights", "model.safetensors"], "--weights does not apply to hf: models"),
    (None, ["--input-shape", "1,3,64,64"], "only the batch can change"),
]


@pytest.mark.parametrize("edit,extra,message", HF_BAD, ids=[m for _, _, m in HF_BAD])
def test_what_cannot_be_exported_is_refused_in_one_line(hf_dir, tmp_path, edit, extra, message):
    folder = folder_with(tmp_path, hf_dir, edit=edit)
    extra = [str(folder / a) if a == "model.safetensors" else a for a in extra]
    result = invoke("onnx", "--model", f"hf:{folder}", "--out", tmp_path / "out", *extra)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if not line.startswith("…")]) == 1  # progress aside


def test_a_matting_model_its_processor_would_pad_is_refused(hf_dir, tmp_path):
    """ViTMatte's processor pads image and trimap to a multiple of its size_divisor: by 24, the tiny
    model's 32x32 would become 48x48, which the model's size does not say; by 32 nothing is padded."""
    folder = folder_with(tmp_path, hf_dir, "VitMatteForImageMatting", edit=set_config(
        "size_divisor", 24, "preprocessor_config.json"))
    result = invoke("onnx", "--model", f"hf:{folder}", "--out", tmp_path / "out")
    assert result.exit_code == 2 and "pads to a multiple of 24 and the model's size 32x32 is not one" in result.stderr
    assert load(SourceSpec(f"hf:{hf_dir('VitMatteForImageMatting')}")).preprocessing["processor"]["pad_to_multiple"] == 32


@pytest.mark.parametrize("spec,message", [("hf:", "hf: needs a directory"),
                                          ("hf:google/vit-base-patch16-224", "never downloads")])
def test_hub_ids_are_not_directories(spec, message):
    with pytest.raises(SourceError, match=message):
        load(SourceSpec(spec))


def test_missing_transformers_names_the_extra(hf_dir, monkeypatch, tmp_path):
    import sys

    folder = hf_dir("ViTModel")  # made with transformers, before it goes away
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it now raises ImportError
    result = invoke("onnx", "--model", f"hf:{folder}", "--out", tmp_path)
    assert result.exit_code == 3 and "pip install 'vitexport[hf]'" in result.stderr


def test_sharded_checkpoints_are_hashed_shard_by_shard(hf_dir, tmp_path):
    from vitexport.models.hf.files import weights_identity

    folder = tmp_path / "sharded"
    model = transformers.ViTForImageClassification.from_pretrained(hf_dir("ViTForImageClassification"))
    model.save_pretrained(folder, max_shard_size="20KB")
    transformers.ViTImageProcessor.from_pretrained(hf_dir("ViTForImageClassification")).save_pretrained(folder)
    assert not (folder / "model.safetensors").exists() and len(list(folder.glob("model-*.safetensors"))) > 1
    loaded = load(SourceSpec(f"hf:{folder}"))
    assert loaded.weights_sha256 == weights_identity(str(folder))[1] and "shards" in loaded.weights_file


def test_a_model_that_fits_its_weights_but_not_this_machine_is_its_limit(hf_dir, monkeypatch):
    """Counted on the meta device before any weight exists: more than this machine's memory is exit 3,
    naming what it needs and what there is."""
    from vitexport.core import environment
    from vitexport.core.errors import TooLargeHere
    from vitexport.models.sources import load

    monkeypatch.setattr(environment, "total_memory_bytes", lambda: 64 * 2**10)
    with pytest.raises(TooLargeHere, match=r"float32 parameters, held about 3 times while exporting, need [\d.]+ GB; "
                                           r"this machine has 6.55e-05 GB") as refused:
        load(SourceSpec(f"hf:{hf_dir('ViTForImageClassification')}"))
    assert refused.value.exit_code == 3
