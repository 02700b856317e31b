"""Small ViT-style models of every task, with seeded weights and outputs that depend on the input: a
patch embedding and one attention block, then the task's head. `TASK_MODELS[task]()` builds one; each
declares `task`, `input_shape` and, with several outputs, `output_names` (a user's factory would too)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

SIZE, PATCH, DIM = 32, 8, 32


class Trunk(nn.Module):
    def __init__(self, channels: int = 3):
        super().__init__()
        self.patch = nn.Conv2d(channels, DIM, PATCH, PATCH)
        self.attn = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.norm = nn.LayerNorm(DIM)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = t + self.attn(t, t, t, need_weights=False)[0]
        return self.norm(t)  # (N, tokens, DIM)


def _grid(t):
    side = SIZE // PATCH
    return t.transpose(1, 2).reshape(t.shape[0], DIM, side, side)


class Depth(nn.Module):
    task, input_shape = "depth", (1, 3, SIZE, SIZE)

    def __init__(self):
        super().__init__()
        self.trunk, self.head = Trunk(), nn.Conv2d(DIM, 1, 1)

    def forward(self, x):
        d = F.interpolate(self.head(_grid(self.trunk(x))), size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        return F.softplus(d).squeeze(1) + 0.1  # positive depth (N, H, W), as DPT's head makes it


class Segmentation(nn.Module):
    task, input_shape = "segmentation", (1, 3, SIZE, SIZE)

    def __init__(self, classes: int = 5):
        super().__init__()
        self.trunk, self.head = Trunk(), nn.Conv2d(DIM, classes, 1)

    def forward(self, x):
        return F.interpolate(self.head(_grid(self.trunk(x))) * 4, size=(SIZE, SIZE), mode="bilinear",
                             align_corners=False)


class Detection(nn.Module):
    """DETR's outputs: class logits with a last "no object" class, and (cx, cy, w, h) boxes in [0, 1]."""

    task, input_shape, output_names = "detection", (1, 3, SIZE, SIZE), ["logits", "pred_boxes"]

    def __init__(self, classes: int = 4):
        super().__init__()
        self.trunk = Trunk()
        self.classes, self.boxes = nn.Linear(DIM, classes + 1), nn.Linear(DIM, 4)

    def forward(self, x):
        t = self.trunk(x)
        return self.classes(t) * 8, torch.sigmoid(self.boxes(t))  # confident: most tokens detect something


class Matting(nn.Module):
    """ViTMatte's input: the image and its trimap as a fourth channel; an alpha matte out."""

    task, input_shape = "matting", (1, 4, SIZE, SIZE)

    def __init__(self):
        super().__init__()
        self.trunk, self.head = Trunk(channels=4), nn.Conv2d(DIM, 1, 1)
        self.preprocessing = {"mean": [0.5] * 4, "std": [0.5] * 4}

    def forward(self, x):
        a = F.interpolate(self.head(_grid(self.trunk(x))), size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        return torch.sigmoid(a)


class Embedding(nn.Module):
    task, input_shape = "embedding", (1, 3, SIZE, SIZE)

    def __init__(self):
        super().__init__()
        self.trunk, self.proj = Trunk(), nn.Linear(DIM, 16)

    def forward(self, x):
        return self.proj(self.trunk(x).mean(1))


def _seeded(cls):
    def make():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return cls()
    return make


TASK_MODELS = {"depth": _seeded(Depth), "segmentation": _seeded(Segmentation), "detection": _seeded(Detection),
               "matting": _seeded(Matting), "embedding": _seeded(Embedding)}

# Factories for `--model tests/task_models.py:NAME`.
depth, segmentation, detection, matting, embedding = (TASK_MODELS[t] for t in
                                                      ("depth", "segmentation", "detection", "matting", "embedding"))


class ViTMatte(nn.Module):
    """transformers' ViTMatte, tiny: a ViTDet backbone with window attention and relative positions
    (which OpenVINO's TorchScript frontend cannot convert) on the image and its trimap."""

    task, input_shape = "matting", (1, 4, SIZE, SIZE)

    def __init__(self):
        super().__init__()
        import transformers as T

        backbone = T.VitDetConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                                  image_size=SIZE, patch_size=16, num_channels=4, out_features=["stage2"],
                                  use_relative_position_embeddings=True, window_block_indices=[0], window_size=2,
                                  pretrain_image_size=48)
        config = T.VitMatteConfig(backbone_config=backbone, hidden_size=32, convstream_hidden_sizes=[8, 16, 16],
                                  fusion_hidden_sizes=[16, 16, 16, 8])
        self.model = T.VitMatteForImageMatting(config).eval()

    def forward(self, x):
        return self.model(pixel_values=x).alphas


vitmatte = _seeded(ViTMatte)
