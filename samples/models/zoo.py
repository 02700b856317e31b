"""ViTs written the ways users write them. vitexport's tests export every one of these, and each
factory doubles as an example of a user module: `vitexport onnx --model samples/models/zoo.py:stock_vit`.

Each factory returns a small, randomly initialised model with an `input_shape` attribute, which
is how a user module tells vitexport its input shape (or pass --input-shape N,C,H,W).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, DEPTH = 64, 2


class StockViT(nn.Module):
    """Stock layers: conv patchify, nn.MultiheadAttention(batch_first=True), ReLU MLP, class token, learned
    positions."""

    input_shape = (1, 3, 64, 64)

    def __init__(self, patch=16, classes=10):
        super().__init__()
        tokens = (64 // patch) ** 2 + 1
        self.patchify = nn.Conv2d(3, WIDTH, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, WIDTH) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, WIDTH) * 0.02)
        self.attn = nn.ModuleList(nn.MultiheadAttention(WIDTH, 4, batch_first=True) for _ in range(DEPTH))
        self.norms = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(2 * DEPTH))
        self.mlps = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
                                  for _ in range(DEPTH))
        self.head = nn.Linear(WIDTH, classes)

    def forward(self, x):
        x = self.patchify(x).flatten(2).transpose(1, 2)  # (n, c, h, w) -> (n, hw, c)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for i, (attn, mlp) in enumerate(zip(self.attn, self.mlps)):
            h = self.norms[2 * i](x)
            x = x + attn(h, h, h, need_weights=False)[0]
            x = x + mlp(self.norms[2 * i + 1](x))
        return self.head(x[:, 0])


class HandAttention(nn.Module):
    """Hand-written attention with the 1/sqrt(d) scale kept in a buffer."""

    def __init__(self, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.LazyLinear(WIDTH), nn.LazyLinear(WIDTH), nn.LazyLinear(WIDTH)
        self.out = nn.LazyLinear(WIDTH)
        self.register_buffer("scale", torch.tensor(1.0 / math.sqrt(WIDTH // heads)))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        n, t, _ = x.shape
        # (n, t, d) -> (n, heads, t, d/heads)
        q, k, v = (p(x).reshape(n, t, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        w = self.drop((q @ k.transpose(-1, -2) * self.scale).softmax(-1))
        return self.out((w @ v).transpose(1, 2).reshape(n, t, -1))


class LazyViT(nn.Module):
    """Lazy layers that only get shapes on a first forward; GELU and dropout; hand-written attention."""

    input_shape = (1, 3, 32, 32)

    def __init__(self):
        super().__init__()
        self.patchify = nn.LazyConv2d(WIDTH, 8, stride=8)
        self.blocks = nn.ModuleList(HandAttention() for _ in range(DEPTH))
        self.mlp = nn.Sequential(nn.LazyLinear(2 * WIDTH), nn.GELU(), nn.Dropout(0.1), nn.LazyLinear(WIDTH))
        self.head = nn.LazyLinear(7)

    def forward(self, x):
        x = self.patchify(x).flatten(2).transpose(1, 2)  # (n, c, h, w) -> (n, hw, c)
        for block in self.blocks:
            x = x + block(F.layer_norm(x, x.shape[-1:]))
        x = x + self.mlp(x)
        return self.head(x.mean(1))


def sinusoid(tokens: int, dim: int) -> torch.Tensor:
    pos = torch.arange(tokens, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(tokens, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


class GrayViT(nn.Module):
    """Grayscale 28x28, patchify as Python loops over the grid, fixed sinusoidal positions in a
    non-persistent buffer, one Linear per head, softmax at the output."""

    input_shape = (1, 1, 28, 28)

    def __init__(self, patch=7, heads=2):
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(patch * patch, WIDTH)
        self.register_buffer("pos", sinusoid((28 // patch) ** 2, WIDTH), persistent=False)
        self.head_q = nn.ModuleList(nn.Linear(WIDTH, WIDTH // heads) for _ in range(heads))
        self.head_k = nn.ModuleList(nn.Linear(WIDTH, WIDTH // heads) for _ in range(heads))
        self.head_v = nn.ModuleList(nn.Linear(WIDTH, WIDTH // heads) for _ in range(heads))
        self.norm = nn.LayerNorm(WIDTH)
        self.classifier = nn.Linear(WIDTH, 10)

    def forward(self, x):
        p = self.patch
        patches = [x[:, :, i:i + p, j:j + p].flatten(1) for i in range(0, 28, p) for j in range(0, 28, p)]
        t = self.embed(torch.stack(patches, 1)) + self.pos  # (n, 16, p*p) -> (n, 16, d)
        heads = []
        for q, k, v in zip(self.head_q, self.head_k, self.head_v):
            w = (q(t) @ k(t).transpose(1, 2) / math.sqrt(q.out_features)).softmax(-1)
            heads.append(w @ v(t))
        t = self.norm(t + torch.cat(heads, -1))
        return self.classifier(t.mean(1)).softmax(-1)


class EinopsViT(nn.Module):
    """einops Rearrange / Reduce / repeat, a fused qkv projection, mean pooling instead of a class token."""

    input_shape = (1, 3, 32, 32)

    def __init__(self, patch=8, heads=4):
        super().__init__()
        from einops.layers.torch import Rearrange, Reduce

        self.heads = heads
        self.to_tokens = nn.Sequential(Rearrange("n c (h p1) (w p2) -> n (h w) (p1 p2 c)", p1=patch, p2=patch),
                                       nn.Linear(patch * patch * 3, WIDTH))
        self.qkv = nn.ModuleList(nn.Linear(WIDTH, 3 * WIDTH) for _ in range(DEPTH))
        self.proj = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH))
        self.norms = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(DEPTH))
        self.pool = Reduce("n t d -> n d", "mean")
        self.head = nn.Linear(WIDTH, 5)
        self.register_token = nn.Parameter(torch.randn(1, WIDTH) * 0.02)

    def forward(self, x):
        from einops import rearrange, repeat

        t = self.to_tokens(x)
        t = torch.cat([repeat(self.register_token, "1 d -> n 1 d", n=t.shape[0]), t], 1)
        for qkv, proj, norm in zip(self.qkv, self.proj, self.norms):
            q, k, v = rearrange(qkv(norm(t)), "n t (three h d) -> three n h t d", three=3, h=self.heads)
            a = F.scaled_dot_product_attention(q, k, v)
            t = t + proj(rearrange(a, "n h t d -> n t (h d)"))
        return self.head(self.pool(t))


class WideViT(nn.Module):
    """Separate bias-free q/k/v, a non-square input, no positional embedding, a 1-output head."""

    input_shape = (1, 3, 32, 64)

    def __init__(self, patch=8):
        super().__init__()
        self.patchify = nn.Conv2d(3, WIDTH, patch, stride=patch)
        self.q = nn.Linear(WIDTH, WIDTH, bias=False)
        self.k = nn.Linear(WIDTH, WIDTH, bias=False)
        self.v = nn.Linear(WIDTH, WIDTH, bias=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        t = self.patchify(x).flatten(2).transpose(1, 2)  # (n, c, 4, 8) -> (n, 32, c)
        h = self.norm(t)
        t = t + F.scaled_dot_product_attention(self.q(h), self.k(h), self.v(h))
        return self.head(t.mean(1))


class TwoOutputViT(nn.Module):
    """Two outputs, as retrieval and distillation models have: class logits and the pooled embedding.
    The `output_names` attribute names them (every artifact keeps the names; every output is checked)."""

    input_shape = (1, 3, 32, 32)
    output_names = ["logits", "embedding"]

    def __init__(self, patch=8, classes=5):
        super().__init__()
        self.patchify = nn.Conv2d(3, WIDTH, patch, stride=patch)
        self.block = nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, classes)

    def forward(self, x):
        t = self.block(self.patchify(x).flatten(2).transpose(1, 2))  # (n, c, 4, 4) -> (n, 16, c)
        embedding = self.norm(t.mean(1))
        return self.head(embedding), embedding


def stock_vit() -> nn.Module:
    return StockViT()


def lazy_vit() -> nn.Module:
    return LazyViT()


def gray_vit() -> nn.Module:
    return GrayViT()


def einops_vit() -> nn.Module:
    return EinopsViT()


def wide_vit() -> nn.Module:
    return WideViT()


def two_output_vit() -> nn.Module:
    return TwoOutputViT()
