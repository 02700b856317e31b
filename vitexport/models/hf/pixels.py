"""One image through an image processor's steps (recorded by `vitexport.models.hf.processor`), computed the
way transformers' torchvision backend computes them, operation for operation, so the pixels match
`AutoImageProcessor.from_pretrained(DIR)(image)` (the tests hold them within 1e-6 on the sample
photos). Needs torchvision, not transformers."""

from __future__ import annotations

from typing import Any

import numpy as np


def processor_pixels(im, steps: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """An opened PIL image -> (3, H, W) float32 for a model taking `shape` (N, 3, H, W), in the channel
    order the processor hands the model (RGB, or MobileViT's BGR)."""
    import torch
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as tvF

    pixels = np.array(rgb(im, steps["convert_rgb"]))
    t = torch.from_numpy(pixels).permute(2, 0, 1).contiguous()  # (h, w, 3) -> (3, h, w), uint8
    if steps["resize"]:
        modes = {"nearest": InterpolationMode.NEAREST_EXACT, "bilinear": InterpolationMode.BILINEAR,
                 "bicubic": InterpolationMode.BICUBIC}
        # uint8 in, uint8 out, as the processor resizes (rounding to 8 bits before normalising)
        t = tvF.resize(t, resized_hw(t.shape[-2:], steps["resize"]), interpolation=modes[steps["resample"]],
                       antialias=True)
    if steps["center_crop"]:
        t = center_crop(t, steps["center_crop"]["height"], steps["center_crop"]["width"])
    t = normalised(t, steps)
    if steps.get("pad_to"):  # SAM's: zeros after normalising, below and to the right of the image
        pad_h, pad_w = steps["pad_to"]["height"] - t.shape[-2], steps["pad_to"]["width"] - t.shape[-1]
        if pad_h >= 0 and pad_w >= 0:
            t = tvF.pad(t, [0, 0, pad_w, pad_h], fill=0)
    if tuple(t.shape[-2:]) != tuple(shape[2:]):
        size = "x".join(map(str, t.shape[-2:]))
        raise ValueError(f"{steps['class']} made it {size}, not the model's {shape[2]}x{shape[3]} (no centre crop "
                         "after an aspect-preserving resize)")
    return (t.flip(0) if steps.get("channel_order") == "BGR" else t).numpy()  # as MobileViT's processor, last


def rgb(im, convert_rgb: bool):
    """RGB at 8 bits. A processor with do_convert_rgb composites transparency onto white, as
    transformers does; the others would fail on a non-RGB image, so Pillow's conversion stands in."""
    from PIL import Image

    if convert_rgb and ("A" in im.getbands() or im.info.get("transparency") is not None):
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, im.convert("RGBA")).convert("RGB")
    return eight_bit(im, 3)


def resized_hw(hw, resize: dict[str, int]) -> list[int]:
    """Target (height, width): fixed, or the shorter side at `shortest_edge` and the longer scaled
    and floored (transformers' get_resize_output_image_size), or the longer side at `longest_edge`
    and the shorter scaled and rounded (SAM's processor)."""
    height, width = int(hw[0]), int(hw[1])
    if "longest_edge" in resize:
        scale = resize["longest_edge"] * 1.0 / max(height, width)
        return [int(height * scale + 0.5), int(width * scale + 0.5)]
    if "shortest_edge" not in resize:
        return [resize["height"], resize["width"]]
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = resize["shortest_edge"], int(resize["shortest_edge"] * long / short)
    return [new_long, new_short] if width <= height else [new_short, new_long]


def center_crop(t, height: int, width: int):
    """transformers' centre crop: zero-pad an image smaller than the crop, then cut the middle."""
    from torchvision.transforms.v2 import functional as tvF

    h, w = t.shape[-2:]
    if height > h or width > w:
        pad = [(width - w) // 2 if width > w else 0, (height - h) // 2 if height > h else 0,
               (width - w + 1) // 2 if width > w else 0, (height - h + 1) // 2 if height > h else 0]
        t = tvF.pad(t, pad, fill=0)
        h, w = t.shape[-2:]
    top, left = int((h - height) / 2.0), int((w - width) / 2.0)
    return tvF.crop(t, top, left, height, width)


def normalised(t, steps: dict[str, Any]):
    """Rescale and normalise fused as transformers fuses them: (x - mean / r) / (std / r) in float32."""
    import torch
    from torchvision.transforms.v2 import functional as tvF

    rescale, mean, std = steps["rescale_factor"], steps["image_mean"], steps["image_std"]
    if mean is not None and rescale is not None:
        mean_t, std_t = torch.tensor(mean) * (1.0 / rescale), torch.tensor(std) * (1.0 / rescale)
        return tvF.normalize(t.to(torch.float32), mean_t, std_t)
    if mean is not None:
        return tvF.normalize(t.to(torch.float32), mean, std)
    return t * rescale if rescale is not None else t.to(torch.float32)


def eight_bit(im, channels: int):
    """RGB (or L for one channel) at 8 bits. CMYK, palette and alpha images convert as Pillow does;
    16-bit grey is scaled to 8 bits (Pillow's own conversion would clip it to white)."""
    from PIL import Image

    if im.mode.startswith("I"):  # "I;16", "I;16B", "I" (32-bit integer grey)
        values = np.asarray(im, dtype=np.float64)
        top = 65535.0 if im.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        im = Image.fromarray(np.clip(np.round(values / top * 255.0), 0, 255).astype(np.uint8), "L")
    elif im.mode == "F":
        values = np.nan_to_num(np.asarray(im, dtype=np.float64))
        im = Image.fromarray(np.clip(np.round(values * 255.0), 0, 255).astype(np.uint8), "L")
    return im.convert("L" if channels == 1 else "RGB")

