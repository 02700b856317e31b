import pytest
import torch

from vitexport.models.presets import PRESETS
from vitexport.models.vit import build, sincos_positions

SMALL = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=10)


@pytest.mark.parametrize("variant", [
    {}, {"pooling": "mean"}, {"pos_embed": "sincos"}, {"pos_embed": "none"}, {"activation": "relu"},
    {"activation": "gelu_tanh"}, {"attention": "manual"}, {"image_size": (32, 64)}, {"in_chans": 1, "mean": (0.5,),
                                                                                   "std": (0.5,)},
    {"num_classes": 0},
])
def test_forward_shapes(variant):
    cfg = PRESETS["tiny"].replace(**{**SMALL, **variant})
    model = build(cfg)
    y = model(torch.randn(3, *cfg.input_shape[1:]))
    assert y.shape == (3, cfg.num_classes or cfg.embed_dim)


def test_manual_and_sdpa_attention_agree():
    a = build(PRESETS["tiny"].replace(**SMALL, attention="sdpa"), seed=1)
    b = build(PRESETS["tiny"].replace(**SMALL, attention="manual"), seed=1)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(a(x), b(x), atol=1e-5, rtol=1e-5)


def test_seeded_build_is_reproducible_and_seed_sensitive():
    cfg = PRESETS["tiny"].replace(**SMALL)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(build(cfg, seed=3)(x), build(cfg, seed=3)(x))
    assert not torch.equal(build(cfg, seed=3)(x), build(cfg, seed=4)(x))


def test_sincos_positions_are_distinct_per_position():
    table = sincos_positions(4, 4, 16)
    assert table.shape == (16, 16)
    assert torch.cdist(table, table).add(torch.eye(16)).min() > 0


def test_wrong_channel_count_is_caught():
    model = build(PRESETS["tiny"].replace(**SMALL))
    with pytest.raises((RuntimeError, AssertionError), match="channel"):
        model(torch.randn(1, 1, 32, 32))
