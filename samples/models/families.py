"""Vision Transformer families from timm, each shrunk to a few blocks (random weights, seeded) so every
backend can export and check all of them in seconds: `vitexport onnx --model samples/models/families.py:hiera`.

Each factory keeps what makes its family hard to export (Swin's shifted windows, Hiera's unrolled
mask units, LeViT's attention biases, MobileViT's unfold, EfficientViT's linear attention, ...) and
cuts depth, width and input size. `FAMILIES` is the registry: the tests parametrize over it with
every backend, and benchmarks/families.py writes the coverage table from it.
"""

from __future__ import annotations

import torch

# family -> (timm model, keyword arguments that shrink it, input side in pixels)
FAMILIES: dict[str, tuple[str, dict, int]] = {
    "beit": ("beit_base_patch16_224", {"depth": 2, "embed_dim": 96, "num_heads": 3, "img_size": 64}, 64),
    "cait": ("cait_xxs24_224", {"depth": 2, "depth_token_only": 1, "img_size": 64}, 64),
    "convit": ("convit_tiny", {"depth": 2, "local_up_to_layer": 1, "img_size": 64}, 64),
    "crossvit": ("crossvit_tiny_240", {"depth": ((1, 1, 0),), "embed_dim": (48, 96), "num_heads": (1, 1)}, 240),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {"depth": 2, "img_size": 64}, 64),
    "dinov2_518": ("vit_small_patch14_dinov2", {"depth": 1, "embed_dim": 96, "num_heads": 3, "img_size": 518}, 518),
    "efficientformer": ("efficientformer_l1", {"depths": (1, 1, 1, 1), "embed_dims": (16, 32, 48, 64),
                                               "num_vit": 1}, 224),
    "efficientvit": ("efficientvit_b0", {"depths": (1, 1, 1, 1), "widths": (8, 16, 32, 64), "head_dim": 16,
                                         "head_widths": (128, 160)}, 64),
    "eva02": ("eva02_tiny_patch14_224", {"depth": 2, "img_size": 56}, 56),
    "fastvit": ("fastvit_t8", {"layers": (1, 1, 1, 1), "embed_dims": (16, 32, 64, 128)}, 64),
    "hiera": ("hiera_tiny_224", {"stages": (1, 1, 1, 1), "embed_dim": 32, "num_heads": 1, "img_size": 64}, 64),
    "levit": ("levit_128s", {"depth": (1, 1, 1), "img_size": 64}, 64),
    "maxvit": ("maxvit_rmlp_nano_rw_256", {"depths": (1, 1, 1, 1), "embed_dim": (32, 64, 96, 128),
                                           "img_size": 64}, 64),
    "mobilevit": ("mobilevit_xxs", {}, 64),
    "mobilevitv2": ("mobilevitv2_050", {}, 64),
    "pit": ("pit_ti_224", {"depth": (1, 1, 1), "img_size": 64}, 64),
    "pvt_v2": ("pvt_v2_b0", {"depths": (1, 1, 1, 1)}, 64),
    "swin": ("swin_tiny_patch4_window7_224", {"depths": (1, 1), "num_heads": (1, 2), "embed_dim": 32,
                                             "img_size": 56}, 56),
    "tiny_vit": ("tiny_vit_5m_224", {"depths": (1, 1, 1, 1), "embed_dims": (16, 32, 64, 64),
                                     "num_heads": (1, 2, 2, 2)}, 224),
    "twins": ("twins_svt_small", {"depths": (1, 1, 1, 1), "embed_dims": (32, 64, 128, 256), "img_size": 64}, 64),
    "xcit": ("xcit_nano_12_p16_224", {"depth": 2, "img_size": 64}, 64),
}
CLASSES = 10
SEED = 0


def build(family: str) -> torch.nn.Module:
    """The family's small variant, in eval mode, its weights drawn from a fixed seed."""
    import timm

    name, kwargs, side = FAMILIES[family]
    torch.manual_seed(SEED)
    model = timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs).eval()
    model.input_shape = (1, 3, side, side)
    return model


def _factory(family: str):
    def factory() -> torch.nn.Module:
        return build(family)

    factory.__name__ = factory.__qualname__ = family
    factory.__doc__ = f"timm's {FAMILIES[family][0]}, shrunk: {FAMILIES[family][1]}"
    return factory


for _family in FAMILIES:  # one factory per family, so each is a model spec: families.py:NAME
    globals()[_family] = _factory(_family)
