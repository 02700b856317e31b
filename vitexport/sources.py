"""Resolve a model spec into an eval-mode nn.Module with a known input shape.

Specs: a preset name (`tiny`), `torchvision:NAME`, `timm:NAME`, `path/to/file.py:factory`,
`pkg.module:factory`. Weights come from .safetensors or a torch checkpoint loaded with
`weights_only=True`; pickles are refused unless the user allows them.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import configs
from .errors import ConfigError, SourceError, WeightsError


@dataclass
class SourceSpec:
    """Everything needed to rebuild the same model later (recorded in every sidecar)."""

    model: str
    overrides: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None
    allow_pickle: bool = False
    input_shape: tuple[int, ...] | None = None
    seed: int = 0  # seeds random init, so weightless models rebuild identically

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape) if self.input_shape else None
        d["overrides"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.overrides.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SourceSpec":
        d = dict(d)
        if d.get("input_shape"):
            d["input_shape"] = tuple(d["input_shape"])
        d["overrides"] = {k: tuple(v) if isinstance(v, list) else v for k, v in (d.get("overrides") or {}).items()}
        return cls(**d)


@dataclass
class LoadedModel:
    spec: SourceSpec
    model: Any  # torch.nn.Module in eval mode
    input_shape: tuple[int, int, int, int]  # (N, C, H, W); N is the static batch
    name: str  # file-name friendly
    kind: str  # preset | torchvision | timm | file | module
    config: configs.ViTConfig | None = None
    weights_sha256: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict:
        return {
            "spec": self.spec.to_dict(),
            "kind": self.kind,
            "config": self.config.to_dict() if self.config else None,
            "weights_sha256": self.weights_sha256,
            "input_shape": list(self.input_shape),
            "preprocessing": self.preprocessing,
        }


def parse_input_shape(text: str) -> tuple[int, int, int, int]:
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        raise SourceError(f"--input-shape expects N,C,H,W integers, got {text!r}") from None
    if len(dims) != 4 or min(dims) <= 0:
        raise SourceError(f"--input-shape expects four positive integers N,C,H,W, got {text!r}")
    return dims  # type: ignore[return-value]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def export_mode():
    """Disable the MultiheadAttention fast path while tracing/exporting (it fails trace checks)."""
    import torch

    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def load(spec: SourceSpec) -> LoadedModel:
    """Build the model, load its weights, put it in eval mode and materialise lazy modules."""
    import torch

    kind = _kind_of(spec.model)
    if spec.overrides and kind != "preset":
        raise ConfigError("--set applies to presets only; configure your own model in its factory")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model, cfg, default_shape, preprocessing = _BUILDERS[kind](spec)
    if not isinstance(model, torch.nn.Module):
        raise SourceError(f"{spec.model} returned {type(model).__name__}, not a torch.nn.Module")
    shape = spec.input_shape or default_shape or _shape_from_module(model)
    if shape is None:
        raise SourceError(f"cannot tell the input shape of {spec.model}: pass --input-shape N,C,H,W "
                          "or give the module an `input_shape` attribute")
    shape = tuple(int(s) for s in shape)
    if len(shape) == 3:
        shape = (1, *shape)
    if cfg is not None and spec.input_shape and tuple(shape[1:]) != (cfg.in_chans, *cfg.image_hw):
        raise ConfigError(f"--input-shape {','.join(map(str, shape))} does not match the preset's "
                          f"{cfg.in_chans}x{cfg.image_hw[0]}x{cfg.image_hw[1]} input; use --set image_size=... instead")
    model.eval()
    _materialise_lazy(model, shape)
    digest = None
    if spec.weights:
        digest = _load_weights(model, Path(spec.weights), spec.allow_pickle)
    elif kind == "torchvision":
        _seed_zero_heads(model, spec.seed)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    name = cfg.name if kind == "preset" else re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.model.split(":")[-1]).strip("_.")
    if preprocessing is None:
        preprocessing = {"mean": list(configs.IMAGENET_MEAN), "std": list(configs.IMAGENET_STD)}
    preprocessing.setdefault("size", list(shape[2:]))
    return LoadedModel(spec, model, shape, name or "model", kind, cfg, digest, preprocessing)


def _kind_of(model: str) -> str:
    if ":" not in model:
        return "preset"
    prefix, _, rest = model.partition(":")
    if prefix in ("torchvision", "timm"):
        return prefix
    if not rest:
        raise SourceError(f"model spec {model!r} lacks a factory name after ':'")
    return "file" if prefix.endswith(".py") else "module"


def _build_preset(spec: SourceSpec):
    from . import model as vit

    cfg = configs.get_preset(spec.model)
    if spec.overrides:
        cfg = cfg.replace(**spec.overrides)
    preprocessing = {"mean": list(cfg.mean), "std": list(cfg.std)}
    return vit.VisionTransformer(cfg), cfg, cfg.input_shape, preprocessing


def _build_torchvision(spec: SourceSpec):
    from torchvision import models

    name = spec.model.partition(":")[2]
    builders = [n for n in models.list_models(module=models) if n.startswith("vit_")]
    if name not in builders:
        raise SourceError(f"unknown torchvision ViT {name!r} (known: {', '.join(builders)})")
    model = models.get_model(name, weights=None)
    size = getattr(model, "image_size", 224)
    return model, None, (1, 3, size, size), None


def _build_timm(spec: SourceSpec):
    try:
        import timm
    except ImportError:
        raise SourceError("timm models need timm: pip install timm") from None
    name = spec.model.partition(":")[2]
    try:
        model = timm.create_model(name, pretrained=False)
    except RuntimeError as e:  # timm raises RuntimeError("Unknown model ...")
        raise SourceError(f"timm: {e}") from None
    data_cfg = getattr(model, "pretrained_cfg", {}) or {}
    shape = data_cfg.get("input_size")
    preprocessing = None
    if data_cfg.get("mean") and data_cfg.get("std"):
        preprocessing = {"mean": list(data_cfg["mean"]), "std": list(data_cfg["std"]),
                         "interpolation": data_cfg.get("interpolation"), "crop_pct": data_cfg.get("crop_pct")}
    return model, None, shape, preprocessing


def _build_file(spec: SourceSpec):
    path_text, _, factory = spec.model.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise SourceError(f"model file not found: {path}")
    module_name = f"vitexport_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:
        raise SourceError(f"importing {path} failed: {type(e).__name__}: {e}") from None
    return _call_factory(module, factory, spec.model)


def _build_module(spec: SourceSpec):
    module_name, _, factory = spec.model.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SourceError(f"cannot import {module_name!r}: {e}") from None
    return _call_factory(module, factory, spec.model)


def _call_factory(module, factory: str, spec_text: str):
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise SourceError(f"{spec_text}: no callable named {factory!r}")
    try:
        model = fn()
    except Exception as e:
        raise SourceError(f"{spec_text}: factory raised {type(e).__name__}: {e}") from None
    preprocessing = getattr(model, "preprocessing", None)
    return model, None, None, dict(preprocessing) if preprocessing else None


_BUILDERS = {"preset": _build_preset, "torchvision": _build_torchvision, "timm": _build_timm,
             "file": _build_file, "module": _build_module}


def _shape_from_module(model) -> tuple[int, ...] | None:
    """`input_shape` attribute (N,C,H,W or C,H,W), else timm's data config."""
    shape = getattr(model, "input_shape", None)
    if shape is not None:
        return tuple(shape)
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return tuple(cfg["input_size"]) if "input_size" in cfg else None


def _materialise_lazy(model, shape) -> None:
    """Run one dry forward so Lazy* modules get their shapes before weights load or export."""
    import torch
    from torch.nn.parameter import UninitializedParameter

    if any(isinstance(p, UninitializedParameter) for p in model.parameters()):
        with torch.no_grad(), export_mode():
            model(torch.zeros(shape))


def _seed_zero_heads(model, seed: int) -> None:
    """torchvision initialises ViT heads to zero, which makes every logit 0 and any parity check vacuous."""
    import torch

    heads = getattr(model, "heads", None)
    if heads is None:
        return
    gen = torch.Generator().manual_seed(seed)
    for layer in heads.modules():
        if isinstance(layer, torch.nn.Linear) and not layer.weight.any():
            with torch.no_grad():
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.02)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) * 0.02)


def read_state_dict(path: Path, allow_pickle: bool) -> dict:
    import torch

    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as e:
            raise WeightsError(f"corrupt safetensors file {path}: {e}") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except Exception as e:  # torch raises many types for bad pickles/zips
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "Unsupported global" in str(e):
            raise WeightsError(f"{path} holds pickled Python objects; refusing to unpickle it. "
                               "Re-save it as safetensors, or pass --allow-pickle if you trust its origin") from None
        detail = "" if "Weights only load failed" in text else f" ({text[:120]})"  # torch's text is a page long
        raise WeightsError(f"cannot read checkpoint {path}: not a valid torch checkpoint{detail}") from None
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WeightsError(f"{path} does not contain a state dict of tensors")
    return obj


def _load_weights(model, path: Path, allow_pickle: bool) -> str:
    state = read_state_dict(path, allow_pickle)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    mismatched = sorted(k for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
    problems = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", mismatched)):
        if keys:
            shown = ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")
            problems.append(f"{label}: {shown}")
    if problems:
        raise WeightsError(f"weights {path.name} do not fit the model; " + "; ".join(problems))
    model.load_state_dict(state, strict=True)
    return sha256_file(path)
