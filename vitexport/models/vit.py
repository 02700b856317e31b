"""The reference Vision Transformer, written to export cleanly.

No data-dependent control flow, no process-global switches, shapes taken from the config
(never from `x.shape[0]` baked as a Python int), so the batch dimension stays symbolic in ONNX.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vitexport.models.presets import ViTConfig


def sincos_positions(grid_h: int, grid_w: int, dim: int) -> torch.Tensor:
    """Fixed 2-D sin-cos position embedding (MAE style), shape (grid_h * grid_w, dim)."""
    quarter = dim // 4
    omega = 1.0 / (10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter))
    ys, xs = torch.meshgrid(torch.arange(grid_h, dtype=torch.float64), torch.arange(grid_w, dtype=torch.float64),
                            indexing="ij")
    out_y = ys.reshape(-1, 1) * omega  # (hw, dim/4)
    out_x = xs.reshape(-1, 1) * omega
    return torch.cat([out_y.sin(), out_y.cos(), out_x.sin(), out_x.cos()], dim=1).float()


class Attention(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.embed_dim // cfg.num_heads
        self.use_sdpa = cfg.attention == "sdpa"
        self.qkv = nn.Linear(cfg.embed_dim, 3 * cfg.embed_dim, bias=cfg.qkv_bias)
        self.proj = nn.Linear(cfg.embed_dim, cfg.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        # (n, t, 3d) -> (3, n, heads, t, head_dim)
        qkv = self.qkv(x).reshape(n, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.use_sdpa:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = (q * (1.0 / math.sqrt(self.head_dim))) @ k.transpose(-2, -1)  # (n, heads, t, t)
            out = scores.softmax(dim=-1) @ v
        # (n, heads, t, head_dim) -> (n, t, d)
        return self.proj(out.transpose(1, 2).reshape(n, t, d))


class Mlp(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.embed_dim, cfg.mlp_dim)
        self.act = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "relu": nn.ReLU()}[cfg.activation]
        self.fc2 = nn.Linear(cfg.mlp_dim, cfg.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.embed_dim, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.embed_dim, eps=cfg.norm_eps)
        self.mlp = Mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.config = cfg
        d = cfg.embed_dim
        self.patch_embed = nn.Conv2d(cfg.in_chans, d, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d)) if cfg.pooling == "cls" else None
        if cfg.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_tokens, d))
        elif cfg.pos_embed == "sincos":
            fixed = sincos_positions(*cfg.grid, d)
            if cfg.pooling == "cls":  # the class token gets a zero position
                fixed = torch.cat([torch.zeros(1, d), fixed])
            self.register_buffer("pos_embed", fixed.unsqueeze(0), persistent=False)
        else:
            self.pos_embed = None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.head = nn.Linear(d, cfg.num_classes) if cfg.num_classes > 0 else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated-normal init as in the ViT papers; every weight carries information (no zero head)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.normal_(module.bias, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                nn.init.normal_(module.weight, mean=1.0, std=0.02)
                nn.init.normal_(module.bias, std=0.02)
        if self.cls_token is not None:
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        torch._assert(x.dim() == 4, "expected input of shape (N, C, H, W)")
        torch._assert(x.shape[1] == cfg.in_chans, "input channel count does not match the model")
        x = self.patch_embed(x)
        # (n, d, gh, gw) -> (n, gh*gw, d)
        x = x.flatten(2).transpose(1, 2)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.forward_features(x)
        pooled = x[:, 0] if self.config.pooling == "cls" else x.mean(dim=1)
        return self.head(pooled)


def build(cfg: ViTConfig, seed: int = 0) -> VisionTransformer:
    """Build the reference model with seeded weights, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VisionTransformer(cfg)
    return model.eval()
