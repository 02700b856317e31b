import pickle

import pytest
import torch
from zoo_models import zoo_spec

from vitexport.core.errors import ConfigError, SourceError, WeightsError
from vitexport.models.presets import PRESETS
from vitexport.models.sources import SourceSpec, load, parse_input_shape
from vitexport.models.vit import build

TINY = {"depth": 1, "image_size": 32, "patch_size": 8}


def tiny_spec(**kw) -> SourceSpec:
    return SourceSpec("tiny", overrides=dict(TINY), **kw)


def save_tiny_weights(path, seed=7, mutate=None):
    state = build(PRESETS["tiny"].replace(**TINY), seed=seed).state_dict()
    if mutate:
        mutate(state)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)
    return state


def test_preset_loads_in_eval_mode_with_its_shape():
    loaded = load(tiny_spec())
    assert loaded.kind == "preset" and loaded.name == "tiny-depth1-image_size32-patch_size8"  # overrides named
    assert loaded.input_shape == (1, 3, 32, 32)
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())


def test_same_spec_rebuilds_identical_weights():
    a, b = load(tiny_spec(seed=5)).model, load(tiny_spec(seed=5)).model
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_weights_load_and_are_hashed(tmp_path, suffix):
    path = tmp_path / f"w{suffix}"
    state = save_tiny_weights(path)
    loaded = load(tiny_spec(weights=str(path)))
    assert torch.equal(loaded.model.state_dict()["head.weight"], state["head.weight"])
    assert len(loaded.weights_sha256) == 64


def test_wrapped_checkpoint_is_unwrapped(tmp_path):
    state = build(PRESETS["tiny"].replace(**TINY), seed=2).state_dict()
    torch.save({"model": state, "epoch": 3}, tmp_path / "ckpt.pth")
    loaded = load(tiny_spec(weights=str(tmp_path / "ckpt.pth")))
    assert torch.equal(loaded.model.state_dict()["head.bias"], state["head.bias"])


class NotATensor:
    pass


def test_pickled_objects_are_refused_unless_allowed(tmp_path):
    state = build(PRESETS["tiny"].replace(**TINY)).state_dict()
    path = tmp_path / "pickled.pt"
    torch.save({"state_dict": state, "extra": NotATensor()}, path)
    with pytest.raises(WeightsError, match="pickled Python objects.*--allow-pickle"):
        load(tiny_spec(weights=str(path)))
    assert load(tiny_spec(weights=str(path), allow_pickle=True)).weights_sha256


@pytest.mark.parametrize("mutate,message", [
    (lambda s: s.pop("head.weight"), "missing: head.weight"),
    (lambda s: s.__setitem__("extra.weight", torch.zeros(1)), "unexpected: extra.weight"),
    (lambda s: s.__setitem__("head.bias", torch.zeros(3)), "shape mismatch: head.bias"),
])
def test_mismatched_weights_are_listed(tmp_path, mutate, message):
    path = tmp_path / "w.safetensors"
    save_tiny_weights(path, mutate=mutate)
    with pytest.raises(WeightsError, match=message):
        load(tiny_spec(weights=str(path)))


@pytest.mark.parametrize("content,suffix,message", [
    (None, ".safetensors", "not found"),
    (b"garbage", ".safetensors", "corrupt safetensors"),
    (b"garbage", ".pt", "cannot read checkpoint"),
])
def test_missing_or_corrupt_weights(tmp_path, content, suffix, message):
    path = tmp_path / f"w{suffix}"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(WeightsError, match=message):
        load(tiny_spec(weights=str(path)))


def test_lazy_modules_are_materialised():
    from torch.nn.parameter import UninitializedParameter

    loaded = load(SourceSpec(zoo_spec("lazy_vit")))
    assert not any(isinstance(p, UninitializedParameter) for p in loaded.model.parameters())
    assert loaded.input_shape == (1, 3, 32, 32)


def test_torchvision_zero_head_is_seeded_so_logits_carry_information():
    loaded = load(SourceSpec("torchvision:vit_b_32"))
    assert loaded.input_shape == (1, 3, 224, 224)
    assert loaded.model.heads.head.weight.abs().sum() > 0


def test_module_spec(tmp_path, monkeypatch):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "nets.py").write_text(
        "import torch\n"
        "def make():\n"
        "    m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 2))\n"
        "    m.input_shape = (3, 2, 2)\n"
        "    return m\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load(SourceSpec("mypkg.nets:make"))
    assert loaded.kind == "module" and loaded.input_shape == (1, 3, 2, 2)


def test_timm_spec():
    pytest.importorskip("timm")
    loaded = load(SourceSpec("timm:vit_tiny_patch16_224"))
    assert loaded.input_shape == (1, 3, 224, 224)
    assert loaded.preprocessing["mean"] == pytest.approx([0.5, 0.5, 0.5])


FACTORY = ("import torch\n"
           "input_shape = (1, 3, 32, 32)  # beside the factory, as scripts write it\n"
           "def make():\n"
           "    m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 2))\n"
           "{extra}"
           "    return m\n")


def test_a_module_level_input_shape_beside_the_factory_is_read(tmp_path):
    (tmp_path / "script.py").write_text(FACTORY.format(extra=""))
    assert load(SourceSpec(f"{tmp_path / 'script.py'}:make")).input_shape == (1, 3, 32, 32)


def test_the_modules_own_input_shape_wins_over_the_constant_and_the_flag_over_both(tmp_path):
    (tmp_path / "script.py").write_text(FACTORY.format(extra="    m.input_shape = (2, 3, 32, 32)\n"))
    spec = f"{tmp_path / 'script.py'}:make"
    assert load(SourceSpec(spec)).input_shape == (2, 3, 32, 32)
    assert load(SourceSpec(spec, input_shape=(4, 3, 32, 32))).input_shape == (4, 3, 32, 32)


@pytest.mark.parametrize("value", ["'224'", "(3, 224)", "(1, 3, 0, 224)", "(1.0, 3, 224, 224)"])
@pytest.mark.parametrize("where", ["module", "attribute"])
def test_a_declared_input_shape_that_is_not_one_is_a_source_error(tmp_path, value, where):
    text = FACTORY.format(extra=f"    m.input_shape = {value}\n" if where == "attribute" else "")
    if where == "module":
        text = text.replace("input_shape = (1, 3, 32, 32)", f"input_shape = {value}")
    (tmp_path / "script.py").write_text(text)
    with pytest.raises(SourceError, match="input_shape should be"):
        load(SourceSpec(f"{tmp_path / 'script.py'}:make"))


def test_input_shape_flag_wins_for_user_models():
    loaded = load(SourceSpec(zoo_spec("stock_vit"), input_shape=(2, 3, 64, 64)))
    assert loaded.input_shape == (2, 3, 64, 64)


@pytest.mark.parametrize("spec,error,message", [
    ("missing_file.py:make", SourceError, "model file not found"),
    (f"{__file__}:no_such_factory", SourceError, "no callable named"),
    ("torchvision:resnet50", SourceError, "unknown torchvision ViT"),
    ("no_such_pkg_xyz.mod:make", SourceError, "cannot import"),
    ("nope", ConfigError, "unknown preset"),
])
def test_bad_specs(spec, error, message):
    with pytest.raises(error, match=message):
        load(SourceSpec(spec))


def test_overrides_only_apply_to_presets():
    with pytest.raises(ConfigError, match="presets only"):
        load(SourceSpec(zoo_spec("stock_vit"), overrides={"depth": 1}))


def test_preset_input_shape_must_match_its_config():
    with pytest.raises(ConfigError, match="does not match the preset"):
        load(tiny_spec(input_shape=(1, 3, 64, 64)))


@pytest.mark.parametrize("text", ["1,3,224", "a,b,c,d", "1,3,0,224"])
def test_bad_input_shape_text(text):
    with pytest.raises(SourceError):
        parse_input_shape(text)


def test_spec_round_trips_through_dict():
    spec = SourceSpec("tiny", overrides={"image_size": (32, 48)}, input_shape=None, seed=4)
    assert SourceSpec.from_dict(pickle.loads(pickle.dumps(spec.to_dict()))) == spec


@pytest.mark.parametrize("shape,code,said", [
    ((1, 3, 100_000, 100_000), 2, "input_shape H=100000 is above 16384; is it a typo?"),
    ((1, 3, 16384, 16384), 3, "a check's inputs alone need 51.5 GB at batch 8; this machine has"),
])
def test_an_input_larger_than_the_machine_is_refused_before_it_is_made(tmp_path, monkeypatch, shape, code, said):
    """A module's own input_shape is read as --input-shape is: an absurd axis is a typo (exit 2), and
    inputs that cannot fit this machine are its limit (exit 3), before any tensor exists."""
    from vitexport.core.errors import VitexportError
    from vitexport.models import sources

    monkeypatch.setattr(sources, "total_memory_bytes", lambda: 24 * 2**30)  # a machine of 24 GiB, whatever this is
    (tmp_path / "script.py").write_text(FACTORY.format(extra=f"    m.input_shape = {shape!r}\n"))
    with pytest.raises(VitexportError) as refused:
        load(SourceSpec(f"{tmp_path / 'script.py'}:make"))
    assert refused.value.exit_code == code and said in str(refused.value), str(refused.value)


def test_an_allocation_that_fails_anyway_is_one_line_and_exit_3(tmp_path, monkeypatch):
    """Where no estimate refused it first (a reference program that allocates when run), the
    allocator's refusal is one line naming it and exit 3, never an internal error."""
    from typer.testing import CliRunner

    from vitexport.cli.app import app
    from vitexport.models import sources

    def greedy(spec):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 171798691840 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(sources, "load", greedy)
    result = CliRunner().invoke(app, ["onnx", "--config", "tiny", "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert "out of memory: [enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory" \
        in " ".join(result.stderr.split()) and "this machine is the limit" in result.stderr
