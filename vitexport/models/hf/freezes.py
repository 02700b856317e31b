"""Export-time freezes. Some models recompute a constant on every forward in a way an exporter
cannot follow; a freeze computes it once at the export resolution, keeps it in a buffer and makes
the module return it. A few rewrite an op a runtime lacks into ops that move the same elements
(MobileViTV2's patch folding). The model then computes exactly what it did (the tests compare bit for bit),
but only at that resolution, which is the one every vitexport artifact has (only the batch varies).

Each freeze returns a note for the sidecar, or None when the model has nothing to freeze.
"""

from __future__ import annotations

import types
from typing import Callable


def _modeling(family: str):
    """transformers' modeling module of a family, through the check that names the `hf` extra."""
    from vitexport.core.errors import import_optional

    return import_optional(f"transformers.models.{family}.modeling_{family}", "hf: models", "hf")


def beit_relative_position_bias(model, height: int, width: int) -> str | None:
    """BEiT rebuilds each layer's relative-position bias per forward (an index table written in place,
    a bilinear resize of the bias table even at its own size): the dynamo ONNX exporter cannot view
    the result and Core ML rejects the in-place writes."""
    import torch

    BeitRelativePositionBias = _modeling("beit").BeitRelativePositionBias

    patch = model.config.patch_size
    window = (height // patch, width // patch)
    frozen = 0
    for module in model.modules():
        if isinstance(module, BeitRelativePositionBias):
            with torch.no_grad():
                bias = module(window, interpolate_pos_encoding=False).clone()  # (1, heads, 1 + hw, 1 + hw)
            module.register_buffer("frozen_bias", bias, persistent=False)
            module.forward = types.MethodType(_frozen_bias, module)  # MethodType: deepcopy rebinds it
            frozen += 1
    if not frozen:
        return None
    return (f"BEiT relative-position bias of {frozen} module(s) computed once for the {window[0]}x{window[1]} "
            f"patch grid ({height}x{width} input) and frozen: the dynamo ONNX exporter and Core ML cannot "
            "convert its per-forward rebuild")


def _frozen_bias(self, *args, **kwargs):
    return self.frozen_bias


def dinov2_position_embeddings(model, height: int, width: int) -> str | None:
    """DINOv2 checkpoints are trained at 518x518 and run at 224x224, so every forward resizes the
    position embeddings bicubically: Core ML has no bicubic upsample."""
    import torch

    Dinov2Embeddings = _modeling("dinov2").Dinov2Embeddings

    for module in model.modules():
        if isinstance(module, Dinov2Embeddings):
            patch_h, patch_w = module.patch_embeddings.patch_size
            tokens = 1 + (height // patch_h) * (width // patch_w)  # class token + patch grid
            # The method reads only the shape and dtype of the embeddings it is given.
            shaped = torch.zeros(1, tokens, module.position_embeddings.shape[-1])
            with torch.no_grad():
                table = module.interpolate_pos_encoding(shaped, height, width).clone()  # (1, tokens, dim)
            module.register_buffer("frozen_position_embeddings", table, persistent=False)
            module.interpolate_pos_encoding = types.MethodType(_frozen_positions, module)
            grid = module.position_embeddings.shape[1] - 1
            return (f"DINOv2 position embeddings resized from {grid} to {tokens - 1} patches once for the "
                    f"{height}x{width} input and frozen: Core ML has no bicubic upsample")
    return None


def _frozen_positions(self, embeddings, height, width):
    return self.frozen_position_embeddings


def yolos_position_embeddings(model, height: int, width: int) -> str | None:
    """YOLOS resizes its position embeddings (and its mid-layer ones) bicubically to the input's patch
    grid on every forward: Core ML has no bicubic upsample, yet the result depends on parameters and
    the input size alone. One forward at the export size records each resize's output."""
    import torch

    yolos = _modeling("yolos")
    kinds = (yolos.InterpolateInitialPositionEmbeddings, yolos.InterpolateMidPositionEmbeddings)
    resizes = [m for m in model.modules() if isinstance(m, kinds)]
    if not resizes:
        return None
    seen: dict = {}
    hooks = [m.register_forward_hook(lambda m, args, out: seen.setdefault(m, out.detach().clone())) for m in resizes]
    try:
        with torch.no_grad():
            model(pixel_values=torch.zeros(1, model.config.num_channels, height, width))
    finally:
        for hook in hooks:
            hook.remove()
    for module in resizes:
        module.register_buffer("frozen_position_embeddings", seen[module], persistent=False)
        module.forward = types.MethodType(_frozen_resize, module)
    patch = model.config.patch_size
    return (f"YOLOS position embeddings ({len(resizes)} table(s)) resized to the {height // patch}x{width // patch} "
            f"patch grid once for the {height}x{width} input and frozen: Core ML has no bicubic upsample")


def _frozen_resize(self, *args, **kwargs):
    return self.frozen_position_embeddings


def mobilevitv2_patches(model, height: int, width: int) -> str | None:
    """MobileViTV2 cuts its feature maps into patches with `unfold` and puts them back with `fold`,
    which export as ONNX Col2Im, an op TensorRT's parser rejects. With the kernel its stride, both only
    move elements: the same as a reshape and a transpose, computed bit for bit alike."""
    layer_class = _modeling("mobilevitv2").MobileViTV2Layer
    layers = [m for m in model.modules() if isinstance(m, layer_class)]
    for layer in layers:
        layer.unfolding = types.MethodType(_patches_by_reshape, layer)
        layer.folding = types.MethodType(_map_by_reshape, layer)
    if not layers:
        return None
    return (f"MobileViTV2 unfold and fold of non-overlapping patches ({len(layers)} layer(s)) rewritten as reshapes "
            "and transposes: the ONNX Col2Im they export to has no TensorRT conversion")


def _patches_by_reshape(self, feature_map):
    b, c, h, w = feature_map.shape
    ph, pw = self.patch_height, self.patch_width
    grid = feature_map.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 1, 3, 5, 2, 4)
    return grid.reshape(b, c, ph * pw, (h // ph) * (w // pw)), (h, w)


def _map_by_reshape(self, patches, output_size):
    b, c, _, _ = patches.shape
    (h, w), ph, pw = output_size, self.patch_height, self.patch_width
    grid = patches.reshape(b, c, ph, pw, h // ph, w // pw).permute(0, 1, 4, 2, 5, 3)
    return grid.reshape(b, c, h, w)


FREEZES: dict[str, Callable[..., str | None]] = {
    "beit-relative-position-bias": beit_relative_position_bias,
    "dinov2-position-embeddings": dinov2_position_embeddings,
    "yolos-position-embeddings": yolos_position_embeddings,
    "mobilevitv2-patches": mobilevitv2_patches,
}
