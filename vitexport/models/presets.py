"""ViT configurations: a frozen dataclass, its validation, and the preset registry."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from vitexport.core.errors import ConfigError

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
POOLINGS = ("cls", "mean")
POS_EMBEDS = ("learned", "sincos", "none")
ATTENTION_IMPLS = ("manual", "sdpa")

# ImageNet statistics: what the standard ViT checkpoints were trained with.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class ViTConfig:
    image_size: int | tuple[int, int] = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    activation: str = "gelu"
    pooling: str = "cls"
    pos_embed: str = "learned"
    attention: str = "sdpa"
    qkv_bias: bool = True
    norm_eps: float = 1e-6
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def image_hw(self) -> tuple[int, int]:
        s = self.image_size
        return (s, s) if isinstance(s, int) else (int(s[0]), int(s[1]))

    @property
    def grid(self) -> tuple[int, int]:
        h, w = self.image_hw
        return h // self.patch_size, w // self.patch_size

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid
        return gh * gw

    @property
    def num_tokens(self) -> int:
        return self.num_patches + (1 if self.pooling == "cls" else 0)

    @property
    def mlp_dim(self) -> int:
        return int(round(self.embed_dim * self.mlp_ratio))

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (1, self.in_chans, *self.image_hw)

    def replace(self, **changes) -> "ViTConfig":
        """A copy with some fields changed; unknown fields are a ConfigError."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["image_size"] = list(self.image_hw)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ViTConfig":
        d = dict(d)
        for key in ("image_size", "mean", "std"):
            if isinstance(d.get(key), list):
                d[key] = tuple(d[key])
        return cls(**d)

    def param_count(self) -> int:
        """Exact parameter count of vitexport.models.vit.VisionTransformer for this config."""
        c, d, p = self.in_chans, self.embed_dim, self.patch_size
        n = c * p * p * d + d  # patch embedding conv
        n += d if self.pooling == "cls" else 0  # class token
        n += self.num_tokens * d if self.pos_embed == "learned" else 0
        qkv_bias = 3 * d if self.qkv_bias else 0
        block = 2 * (2 * d)  # two LayerNorms
        block += 3 * d * d + qkv_bias + d * d + d  # qkv + output projection
        block += d * self.mlp_dim + self.mlp_dim + self.mlp_dim * d + d  # MLP
        n += self.depth * block
        n += 2 * d  # final norm
        n += d * self.num_classes + self.num_classes if self.num_classes > 0 else 0
        return n

    def gflops(self) -> float:
        """Forward GFLOPs per image, counting a multiply-add as two FLOPs (matmuls only)."""
        t, d, m = self.num_tokens, self.embed_dim, self.mlp_dim
        patch = 2 * self.num_patches * self.in_chans * self.patch_size**2 * d
        attn_proj = 2 * t * d * (4 * d)  # qkv + output projection
        attn_mix = 2 * 2 * t * t * d  # q @ k^T and attn @ v
        mlp = 2 * 2 * t * d * m
        head = 2 * d * self.num_classes
        return (patch + self.depth * (attn_proj + attn_mix + mlp) + head) / 1e9


def validate(cfg: ViTConfig) -> None:
    """Raise ConfigError for a configuration that cannot be built."""
    h, w = cfg.image_hw
    positive = {"image height": h, "image width": w, "patch_size": cfg.patch_size, "in_chans": cfg.in_chans,
                "embed_dim": cfg.embed_dim, "depth": cfg.depth, "num_heads": cfg.num_heads}
    for what, value in positive.items():
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{what} must be a positive integer, got {value!r}")
    if cfg.num_classes < 0:
        raise ConfigError(f"num_classes must be >= 0, got {cfg.num_classes}")
    if h % cfg.patch_size or w % cfg.patch_size:
        raise ConfigError(f"image size {h}x{w} is not divisible by patch size {cfg.patch_size}")
    if cfg.embed_dim % cfg.num_heads:
        raise ConfigError(f"num_heads {cfg.num_heads} does not divide embed_dim {cfg.embed_dim}")
    for what, value in (("mlp_ratio", cfg.mlp_ratio), ("norm_eps", cfg.norm_eps)):
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{what} must be a finite number > 0, got {value}")
    if cfg.mlp_dim < 1:
        raise ConfigError(f"mlp_ratio {cfg.mlp_ratio} leaves no MLP units at embed_dim {cfg.embed_dim}")
    for name, value, allowed in (("activation", cfg.activation, ACTIVATIONS), ("pooling", cfg.pooling, POOLINGS),
                                 ("pos_embed", cfg.pos_embed, POS_EMBEDS),
                                 ("attention", cfg.attention, ATTENTION_IMPLS)):
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    if cfg.pos_embed == "sincos" and cfg.embed_dim % 4:
        raise ConfigError(f"sin-cos positions need embed_dim divisible by 4, got {cfg.embed_dim}")
    if len(cfg.mean) != cfg.in_chans or len(cfg.std) != cfg.in_chans:
        raise ConfigError(f"mean/std need {cfg.in_chans} values (one per input channel)")
    if not all(math.isfinite(v) for v in (*cfg.mean, *cfg.std)):
        raise ConfigError("mean/std values must be finite numbers")
    if any(s <= 0 for s in cfg.std):
        raise ConfigError("std values must be > 0")


def memory_estimate(cfg: ViTConfig, batch: int = 1) -> tuple[float, float]:
    """(parameter bytes, activation bytes) of one float32 forward at `batch`, a lower bound.

    Activations: what is alive at once inside one block (a few token x width tensors, the MLP's
    hidden layer, and the attention matrix of every head); export and verification hold about
    twice the parameters on top (the model, and the artifact being written or run)."""
    t, d = cfg.num_tokens, cfg.embed_dim
    params = 4.0 * cfg.param_count()
    activations = 4.0 * batch * (4 * t * d + t * cfg.mlp_dim + cfg.num_heads * t * t)
    return params, activations


def check_fits(cfg: ViTConfig, available_bytes: float | None, batch: int = 1) -> None:
    """Refuse a configuration whose export could not fit in memory (a typo such as image_size=100000
    or depth=10000), with the estimate, before anything is allocated."""
    if available_bytes is None:
        return
    params, activations = memory_estimate(cfg, batch)
    needed = 3 * params + activations
    if needed > available_bytes:
        raise ConfigError(f"this configuration needs about {needed / 1e9:.3g} GB to export (parameters "
                          f"{params / 1e9:.3g} GB, held about three times, activations {activations / 1e9:.3g} GB at "
                          f"batch {batch}); this machine has {available_bytes / 1e9:.3g} GB")


def _preset(name: str, **kw) -> ViTConfig:
    return ViTConfig(name=name, **kw)


# Standard ViT sizes (Dosovitskiy et al. 2021; Ti/S from DeiT): width, depth, heads, MLP = 4 x width.
PRESETS: dict[str, ViTConfig] = {
    cfg.name: cfg
    for cfg in (
        _preset("tiny", embed_dim=192, depth=12, num_heads=3),
        _preset("small", embed_dim=384, depth=12, num_heads=6),
        _preset("base", embed_dim=768, depth=12, num_heads=12),
        _preset("large", embed_dim=1024, depth=24, num_heads=16),
        _preset("huge", patch_size=14, embed_dim=1280, depth=32, num_heads=16),
        # Variants users ask for.
        _preset("base-32", patch_size=32, embed_dim=768, depth=12, num_heads=12),
        _preset("base-384", image_size=384, embed_dim=768, depth=12, num_heads=12),
        _preset("small-gap", embed_dim=384, depth=12, num_heads=6, pooling="mean", pos_embed="sincos"),
        _preset("tiny-relu", embed_dim=192, depth=12, num_heads=3, activation="relu", attention="manual"),
        # The trained sample (samples/digits): 8x8 grayscale handwritten digits, 2x2 patches.
        _preset("digits", image_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=64, depth=4,
                num_heads=4, mean=(0.5,), std=(0.5,)),
    )
}


def get_preset(name: str) -> ViTConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None


def parse_overrides(items: list[str]) -> dict:
    """Parse `KEY=VALUE` strings (from --set) into typed config overrides."""
    fields = {f.name: f for f in dataclasses.fields(ViTConfig)}
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not raw:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        if key not in fields or key == "name":
            known = ", ".join(k for k in fields if k != "name")
            raise ConfigError(f"unknown config field {key!r} in --set (known: {known})")
        out[key] = _coerce(key, raw.strip())
    return out


def _coerce(key: str, raw: str):
    try:
        if key == "image_size":
            parts = [int(p) for p in raw.replace("x", ",").split(",")]
            return parts[0] if len(parts) == 1 else tuple(parts)
        if key in ("mean", "std"):
            return tuple(float(p) for p in raw.split(","))
        if key in ("mlp_ratio", "norm_eps"):
            return float(raw)
        if key == "qkv_bias":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if key in ("activation", "pooling", "pos_embed", "attention"):
            return raw
        return int(raw)
    except ValueError:
        raise ConfigError(f"bad value {raw!r} for {key}") from None
