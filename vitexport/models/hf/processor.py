"""The directory's image processor as vitexport preprocessing: plain data that `pixels` applies
without transformers, recorded in the sidecar, used for `--images`, the check inputs' normalisation
and Core ML's `--image-input`.

It reproduces the processor users get by default: `AutoImageProcessor.from_pretrained(DIR)`, which
in transformers 5 is the torchvision backend. (The PIL backend, `backend="pil"`, resizes differently
and gives pixels up to a few grey levels apart on downscaled images; only one of the two can be matched.)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vitexport.core.errors import SourceError, explained
from vitexport.core.jsonfile import read_json
from vitexport.models.hf.files import PROCESSOR

# Processors whose steps are TorchvisionBackend's own: convert, resize, centre-crop, rescale and
# normalise (BEiT's and SegFormer's add segmentation maps, YOLOS's and DETR's boxes: labels only). Another processor
# may do more than `pixels` does; DPT's does more only with the settings `SIZE_RULES` refuses.
SUPPORTED = ("ViTImageProcessor", "DeiTImageProcessor", "BeitImageProcessor", "BitImageProcessor",
             "CLIPImageProcessor", "SiglipImageProcessor", "DPTImageProcessor", "SegformerImageProcessor",
             "YolosImageProcessor", "DetrImageProcessor", "VitMatteImageProcessor", "MobileViTImageProcessor",
             "SamImageProcessor", "Mask2FormerImageProcessor", "RTDetrImageProcessor")
# Mask2Former's processor rounds the resized size up to a multiple of `size_divisor` (none at a fixed size
# that is one: checked) and pads a batch to its largest image (none when every image has one size).
ROUNDS_UP = ("Mask2FormerImageProcessor",)
# SAM's processor resizes the longer side and pads every image to one size (`pad_size`), zeros after
# normalising: the model's input has that size whatever the image's shape.
PADS_TO_SIZE = ("SamImageProcessor",)
# DETR's, YOLOS's and RT-DETR's processors pad every image of a batch to the batch's largest (or to
# `pad_size`): nothing at all where every image ends at one size that `pad_size`, if given, equals.
PADS_TO_LARGEST = ("DetrImageProcessor", "YolosImageProcessor", "RTDetrImageProcessor")
# ViTMatte's processor takes each image with its trimap, rescaled (not normalised) as a fourth channel,
# and pads both to a multiple of `size_divisor`: none at an export size that already is one (model.py).
TRIMAP = ("VitMatteImageProcessor",)
# Settings that make the resized size depend on the image (vitexport's artifacts take one size):
# (attribute, the value vitexport reproduces, what the setting does)
SIZE_RULES = (("keep_aspect_ratio", False, "keeps the aspect ratio"),
              ("ensure_multiple_of", 1, "rounds the size to a multiple of {value}"))
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL codes the processors store -> what `pixels` runs


def preprocessing(transformers, path: Path, default_class: str, image_size: int) -> dict[str, Any]:
    """vitexport's preprocessing dict from the directory's processor, or from `default_class` at the
    config's image size when the directory has none."""
    if (path / PROCESSOR).exists():
        read_json(path / PROCESSOR, "hf: model file", error=SourceError)  # bounded, before transformers opens it
        try:
            proc = transformers.AutoImageProcessor.from_pretrained(str(path), local_files_only=True,
                                                                   trust_remote_code=False)
        except Exception as e:  # transformers raises ValueError, OSError, KeyError... for bad configs
            raise SourceError(f"hf:{path}: cannot read {PROCESSOR}: {type(e).__name__}: "
                              f"{explained(e)}") from None
        origin = PROCESSOR
    else:
        proc = at_size(getattr(transformers, default_class), image_size)
        origin = f"{default_class} defaults at the config's image_size {image_size} (the directory has no {PROCESSOR})"
    return recipe(proc, origin, str(path))


def at_size(cls, size: int):
    """The class's own defaults with the resize (and crop) at `size`."""
    base = cls()
    resize = {"shortest_edge": size} if base.size.shortest_edge else {"height": size, "width": size}
    return cls(size=resize, crop_size={"height": size, "width": size})


def recipe(proc, origin: str, where: str) -> dict[str, Any]:
    name = type(proc).__name__
    if name not in SUPPORTED or getattr(proc, "backend", None) != "torchvision":
        raise SourceError(f"hf:{where}: its image processor {name} is not one vitexport reproduces "
                          f"({', '.join(SUPPORTED)}, torchvision backend)")
    pad = int(getattr(proc, "size_divisor", 0) or 0) if name in TRIMAP and getattr(proc, "do_pad", False) else None
    pad_to = _pad_size(proc) if name in PADS_TO_SIZE and getattr(proc, "do_pad", False) else None
    if getattr(proc, "do_pad", False) and not (pad or pad_to or _pads_nothing(proc)):
        raise SourceError(f"hf:{where}: {name} pads images (do_pad), which vitexport does not reproduce"
                          + (f": save it at one size (size={{'height': H, 'width': W}}, pad_size unset or the same) "
                             "or with do_pad=False" if name in PADS_TO_LARGEST else ""))
    for key, plain, does in SIZE_RULES:
        value = getattr(proc, key, plain)
        if value not in (plain, None):
            raise SourceError(f"hf:{where}: {name} {does.format(value=value)} ({key}={value}), so its output size "
                              f"depends on the image; vitexport exports one size: save it with {key}={plain}")
    resize = _resize(proc, where) if proc.do_resize else None
    divisor = int(getattr(proc, "size_divisor", 0) or 0) if name in ROUNDS_UP else 0
    if divisor and resize and (resize.get("height", 1) % divisor or resize.get("width", 1) % divisor):
        raise SourceError(f"hf:{where}: {name} rounds its size up to a multiple of {divisor} (size_divisor), which "
                          f"{resize.get('height')}x{resize.get('width')} is not: save it at such a size")
    crop = {"height": proc.crop_size.height, "width": proc.crop_size.width} if proc.do_center_crop else None
    if proc.do_resize and proc.resample not in RESAMPLE:
        raise SourceError(f"hf:{where}: {name} resamples with PIL code {proc.resample}; vitexport reproduces "
                          f"{', '.join(RESAMPLE.values())}")
    rescale = float(proc.rescale_factor) if proc.do_rescale else None
    mean = _per_channel(proc.image_mean) if proc.do_normalize else None
    std = _per_channel(proc.image_std) if proc.do_normalize else None
    steps = {"class": name, "backend": "torchvision", "from": origin, "convert_rgb": bool(proc.do_convert_rgb),
             "resize": resize, "resample": RESAMPLE[proc.resample] if resize else None, "antialias": True,
             "center_crop": crop, "rescale_factor": rescale, "image_mean": mean, "image_std": std}
    eff_mean, eff_std = unit_normalisation(rescale, mean, std)
    if pad_to:
        steps["pad_to"] = pad_to
    if getattr(proc, "do_flip_channel_order", False):  # MobileViT's: the model takes BGR, flipped last
        steps["channel_order"] = "BGR"
        eff_mean, eff_std = eff_mean[::-1], eff_std[::-1]
    if name in TRIMAP:  # the trimap's channel: rescaled alone, so x / 255 / (1 / (255 * rescale))
        steps.update(trimap=True, pad_to_multiple=pad)
        eff_mean, eff_std = eff_mean + [0.0], eff_std + unit_normalisation(rescale, None, None)[1][:1]
    return {"mean": eff_mean, "std": eff_std, "processor": steps, "description": describe(steps)}


def _resize(proc, where: str) -> dict[str, int]:
    size = proc.size
    if size.height and size.width and not size.shortest_edge:
        return {"height": size.height, "width": size.width}
    if size.shortest_edge and not (size.longest_edge or size.max_height or size.max_width):
        return {"shortest_edge": size.shortest_edge}
    sam = type(proc).__name__ in PADS_TO_SIZE
    if sam and size.longest_edge and not (size.shortest_edge or size.height or size.width):
        return {"longest_edge": size.longest_edge}  # then padded to one size: see PADS_TO_SIZE
    raise SourceError(f"hf:{where}: {type(proc).__name__} resizes to {dict(size)}; vitexport reproduces "
                      "{height, width}, {shortest_edge} and SAM's {longest_edge} with its pad")


def _pads_nothing(proc) -> bool:
    """Whether padding to the largest image (or to `pad_size`) leaves every image as it is: each is
    resized (and cropped) to one size, and `pad_size`, where given, is that size."""
    if type(proc).__name__ not in PADS_TO_LARGEST:
        return False
    if getattr(proc, "do_center_crop", False) and proc.crop_size and proc.crop_size.height and proc.crop_size.width:
        final = (proc.crop_size.height, proc.crop_size.width)
    elif proc.do_resize and proc.size.height and proc.size.width and not proc.size.shortest_edge:
        final = (proc.size.height, proc.size.width)
    else:
        return False  # the size depends on the image: padding to the largest changes some
    pad_to = _pad_size(proc)
    return pad_to is None or (pad_to["height"], pad_to["width"]) == final


def _pad_size(proc) -> dict[str, int] | None:
    size = getattr(proc, "pad_size", None)
    return {"height": int(size.height), "width": int(size.width)} if size and size.height and size.width else None


def _per_channel(value) -> list[float]:
    values = [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)] * 3
    if len(values) != 3:
        raise SourceError(f"image mean/std {value!r} is not one value per RGB channel")
    return values


def unit_normalisation(rescale: float | None, mean: list[float] | None,
                       std: list[float] | None) -> tuple[list[float], list[float]]:
    """The processor's (pixel * rescale - mean) / std as (pixel / 255 - m) / s, the form the rest of
    vitexport uses (seeded check inputs, Core ML's folded image input): m = mean / (255 * rescale)."""
    unit = 255.0 * (rescale if rescale is not None else 1.0)
    if math.isclose(unit, 1.0, rel_tol=1e-9):
        unit = 1.0  # the usual 1/255: keep the processor's own numbers
    mean, std = mean or [0.0] * 3, std or [1.0] * 3
    return [m / unit for m in mean], [s / unit for s in std]


def describe(steps: dict[str, Any]) -> str:
    parts = []
    resize = steps["resize"]
    if resize:
        target = f"shorter side {resize['shortest_edge']}" if "shortest_edge" in resize \
            else f"longer side {resize['longest_edge']}" if "longest_edge" in resize \
            else f"{resize['height']}x{resize['width']}"
        parts.append(f"resize to {target} {steps['resample']} (antialiased)")
    if steps["center_crop"]:
        parts.append(f"centre-crop {steps['center_crop']['height']}x{steps['center_crop']['width']}")
    if steps["rescale_factor"] is not None:
        parts.append(f"rescale x{steps['rescale_factor']:.6g}")
    if steps["image_mean"] is not None:
        parts.append(f"normalise mean {_short(steps['image_mean'])} std {_short(steps['image_std'])}")
    if steps.get("pad_to"):
        parts.append(f"pad to {steps['pad_to']['height']}x{steps['pad_to']['width']} below and right (zeros, "
                     "after normalising)")
    if steps.get("channel_order") == "BGR":
        parts.append("flip the channels to BGR")
    if steps.get("trimap"):
        parts.append("the trimap rescaled as a fourth channel")
    if steps.get("pad_to_multiple"):
        parts.append(f"pad to a multiple of {steps['pad_to_multiple']}")
    return f"{steps['class']} (transformers' default torchvision backend): " + ", ".join(parts)


def _short(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"
