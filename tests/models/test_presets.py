import pytest

from vitexport.core.errors import ConfigError
from vitexport.models import presets as configs
from vitexport.models.presets import PRESETS, ViTConfig

# Published parameter counts (millions) of the standard sizes.
PUBLISHED_PARAMS_M = {"tiny": 5.7, "small": 22.1, "base": 86.6, "large": 304.3, "huge": 632.0}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_param_count_formula_matches_the_built_model(name):
    from vitexport.models.vit import VisionTransformer

    cfg = PRESETS[name].replace(depth=1)  # depth 1 keeps huge cheap; the formula is per block
    model = VisionTransformer(cfg)
    assert cfg.param_count() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name,millions", sorted(PUBLISHED_PARAMS_M.items()))
def test_standard_sizes_match_the_literature(name, millions):
    assert PRESETS[name].param_count() / 1e6 == pytest.approx(millions, abs=0.1)


def test_base_gflops_matches_published_figure():
    assert PRESETS["base"].gflops() == pytest.approx(35.1, abs=0.2)  # 17.6 GMACs


@pytest.mark.parametrize("changes,message", [
    ({"image_size": 225}, "not divisible by patch size"),
    ({"image_size": (224, 200)}, "not divisible by patch size"),
    ({"num_heads": 5}, "does not divide embed_dim"),
    ({"activation": "swish"}, "activation must be one of"),
    ({"pooling": "max"}, "pooling must be one of"),
    ({"pos_embed": "rope"}, "pos_embed must be one of"),
    ({"depth": 0}, "depth must be a positive integer"),
    ({"in_chans": 1}, "mean/std need 1 values"),
    ({"mlp_ratio": 0.0}, "mlp_ratio must be a finite number > 0"),
])
def test_impossible_configs_raise_clear_errors(changes, message):
    with pytest.raises(ConfigError, match=message):
        PRESETS["tiny"].replace(**changes)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown preset 'nope'.*tiny"):
        configs.get_preset("nope")


def test_overrides_are_typed():
    parsed = configs.parse_overrides(["depth=2", "image_size=32x64", "mlp_ratio=2", "qkv_bias=false",
                                      "mean=0.5", "std=0.5", "in_chans=1"])
    assert parsed == {"depth": 2, "image_size": (32, 64), "mlp_ratio": 2.0, "qkv_bias": False,
                      "mean": (0.5,), "std": (0.5,), "in_chans": 1}
    cfg = PRESETS["tiny"].replace(**parsed)
    assert cfg.input_shape == (1, 1, 32, 64)


@pytest.mark.parametrize("item", ["depth", "depth=", "nope=1", "depth=two", "qkv_bias=maybe"])
def test_bad_overrides(item):
    with pytest.raises(ConfigError):
        configs.parse_overrides([item])


def test_config_round_trips_through_dict():
    cfg = PRESETS["small-gap"].replace(image_size=(32, 48), depth=2)
    assert ViTConfig.from_dict(cfg.to_dict()) == cfg
