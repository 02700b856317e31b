"""--weights with the checkpoints torchvision and timm publish (their layouts, rebuilt here from seeded
models: nothing is downloaded) and with training checkpoints whose keys carry a wrapper's prefix."""

from collections import OrderedDict

import pytest
import torch

from vitexport.core.errors import WeightsError
from vitexport.models.sources import SourceSpec, load
from vitexport.models.weights import load_weights


def tiny_torchvision_vit(seed=0):
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=5).eval()


def released_layout(state: OrderedDict) -> OrderedDict:
    """torchvision's ViT checkpoints predate 0.14, where the MLP became `mlp.0`/`mlp.3`: they name the
    layers `mlp.linear_1`/`mlp.linear_2`, with module version 1 in the metadata."""
    renamed = OrderedDict((k.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2."), v)
                          for k, v in state.items())
    renamed._metadata = OrderedDict((k, {"version": 1} if k.endswith(".mlp") else v)
                                    for k, v in state._metadata.items() if not k.endswith((".mlp.0", ".mlp.3")))
    return renamed


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("metadata", [True, False], ids=["torch.save", "no metadata"])
def test_torchvision_released_layout_loads(tmp_path, metadata):
    source = tiny_torchvision_vit(seed=1)
    state = released_layout(source.state_dict())
    if not metadata:
        state = OrderedDict(state)  # a re-saved file may lose the per-module versions: the layout still loads
    path = tmp_path / "vit_t-0123abcd.pth"
    torch.save(state, path)
    model = tiny_torchvision_vit(seed=2)
    digest, note = load_weights(model, path, allow_pickle=False)
    assert same_weights(model, source) and note is None and len(digest) == 64


@pytest.mark.parametrize("prefix", ["module.", "model."])
@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_a_training_wrappers_prefix_is_removed_and_said(tmp_path, prefix, suffix):
    source = tiny_torchvision_vit(seed=1)
    state = OrderedDict((prefix + k, v) for k, v in source.state_dict().items())
    path = tmp_path / f"ckpt{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(dict(state), str(path))
    else:
        torch.save({"state_dict": state, "epoch": 90}, path)
    model = tiny_torchvision_vit(seed=2)
    _, note = load_weights(model, path, allow_pickle=False)
    assert same_weights(model, source)
    assert f"every key began with '{prefix}'" in note and "removed it" in note


def test_a_prefix_is_kept_when_removing_it_does_not_make_the_keys_fit(tmp_path):
    state = OrderedDict(("module." + k, v) for k, v in tiny_torchvision_vit().state_dict().items())
    state.pop("module.heads.head.bias")
    torch.save(state, tmp_path / "ckpt.pth")
    with pytest.raises(WeightsError, match="missing: class_token.*unexpected: module.class_token"):
        load_weights(tiny_torchvision_vit(), tmp_path / "ckpt.pth", allow_pickle=False)


def test_a_prefix_on_some_keys_only_is_not_removed(tmp_path):
    state = tiny_torchvision_vit().state_dict()
    state = OrderedDict((("module." + k) if k.startswith("heads") else k, v) for k, v in state.items())
    torch.save(state, tmp_path / "ckpt.pth")
    with pytest.raises(WeightsError, match="missing: heads.head.bias, heads.head.weight; unexpected: module.heads"):
        load_weights(tiny_torchvision_vit(), tmp_path / "ckpt.pth", allow_pickle=False)


def test_a_renamed_key_of_the_wrong_shape_is_named(tmp_path):
    state = released_layout(tiny_torchvision_vit().state_dict())
    state["encoder.layers.encoder_layer_0.mlp.linear_1.bias"] = torch.zeros(3)
    torch.save(state, tmp_path / "ckpt.pth")
    with pytest.raises(WeightsError, match="shape mismatch: .*encoder_layer_0.mlp.0.bias"):
        load_weights(tiny_torchvision_vit(), tmp_path / "ckpt.pth", allow_pickle=False)


@pytest.mark.parametrize("filename", ["model.safetensors", "pytorch_model.bin"])
def test_timm_released_files_load_into_their_architecture(tmp_path, filename):
    """The hub's timm/<name> repos hold both files, flat state dicts in the model's own layout."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(3)
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    path = tmp_path / filename
    if filename.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(source.state_dict(), str(path))
    else:
        torch.save(source.state_dict(), path)
    loaded = load(SourceSpec("timm:vit_tiny_patch16_224", weights=str(path)))
    assert same_weights(loaded.model, source) and loaded.notes == [] and loaded.weights_file == str(path)


@pytest.mark.slow
def test_torchvision_vit_b_16_from_its_released_layout_matches_pytorch(tmp_path):
    """The README's command, `vitexport onnx --model torchvision:vit_b_16 --weights vit_b_16-c867db91.pth`,
    on a seeded replica in the released file's layout."""
    from torchvision.models import vit_b_16
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    torch.manual_seed(0)
    model = vit_b_16()
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)  # torchvision zeroes it; trained weights do not
    path = tmp_path / "vit_b_16-c867db91.pth"
    torch.save(released_layout(model.state_dict()), path)
    result = CliRunner().invoke(app, ["onnx", "--model", "torchvision:vit_b_16", "--weights", str(path), "--out",
                                      str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    assert '"passed": true' in result.stdout


def test_a_checkpoint_that_inflates_far_beyond_its_size_is_refused_before_torch_reads_it(tmp_path):
    """A zip checkpoint whose tensor entry is a few compressed bytes declaring 64 MB (a real bomb
    declares gigabytes): refused from the sizes the archive declares, exit 2, before torch.load."""
    import zipfile

    from vitexport.core.errors import SourceError

    path = tmp_path / "bomb.pt"
    torch.save({"w": torch.zeros(4)}, path)
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as w:
        for name, data in entries:
            big = name.endswith("/data/0")
            w.writestr(name, bytes(64 * 2**20) if big else data,
                       compress_type=zipfile.ZIP_DEFLATED if big else zipfile.ZIP_STORED)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(SourceError, match=r"weights file bomb.pt: its entry .*data/0 inflates [\d,]+ bytes to 67,108,864"):
        load_weights(model, path, allow_pickle=False)
