"""Convolutions: conv (1-D and 2-D, groups, dilation, every pad_type) and conv_transpose."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.args import ints


def conv_padding(pad_type, pad, spatial, kernel, strides, dilations, op="conv") -> list[tuple[int, int]]:
    """(before, after) padding per spatial axis, as conv and the pools define pad_type."""
    if pad_type == "custom":
        p = ints(pad) if pad is not None else [0] * (2 * len(spatial))
        return [(p[2 * i], p[2 * i + 1]) for i in range(len(spatial))]
    if pad_type in ("same", "same_lower"):
        out = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            out.append((small, total - small) if pad_type == "same" else (total - small, small))
        return out
    if pad_type == "valid":
        return [(0, 0)] * len(spatial)
    raise UnsupportedOpError(op, detail=f"pad_type {pad_type!r}")


def _conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, **_):
    if x.ndim == 3:  # conv1d: run as a 2-D conv over a height of 1
        y = _conv(x[:, :, None], weight[:, :, None], bias, _height_one(strides), pad_type,
                  None if pad is None else [0, 0, *ints(pad)], _height_one(dilations), groups)
        return y[:, :, 0]
    if x.ndim != 4:
        raise UnsupportedOpError("conv", detail=f"rank-{x.ndim} input")
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    sh, sw = ints(strides) if strides is not None else (1, 1)
    dh, dw = ints(dilations) if dilations is not None else (1, 1)
    g = int(groups)
    (top, bottom), (left, right) = conv_padding(pad_type, pad, (h, w), (kh, kw), (sh, sw), (dh, dw))
    if g == 1 and (sh, sw) == (kh, kw) and (dh, dw) == (1, 1) and not (top or bottom or left or right) \
            and h % kh == 0 and w % kw == 0:
        y = _patchify(x, weight)
    else:
        x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))) if top or bottom or left or right else x
        h, w = x.shape[2:]
        oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
        s = x.strides
        # im2col as a view: (n, groups, cin_g, oh, ow, kh, kw), no copy until the contraction
        cols = np.lib.stride_tricks.as_strided(
            x, (n, g, cin_g, oh, ow, kh, kw),
            (s[0], s[1] * cin_g, s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw), writeable=False)
        wg = weight.reshape(g, cout // g, cin_g, kh, kw)
        y = np.einsum("ngcijkl,gockl->ngoij", cols, wg, optimize=True).reshape(n, cout, oh, ow)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y


def _height_one(values) -> list[int]:
    """A conv1d stride/dilation as the 2-D one over (1, width)."""
    return [1, *(ints(values) if values is not None else [1])]


def _patchify(x, weight):
    """Stride == kernel, no padding (a ViT's patch embedding): one GEMM over non-overlapping patches."""
    n, c, h, w = x.shape
    cout, _, kh, kw = weight.shape
    oh, ow = h // kh, w // kw
    patches = x.reshape(n, c, oh, kh, ow, kw).transpose(0, 2, 4, 1, 3, 5)  # (n, oh, ow, c, kh, kw)
    y = patches.reshape(n * oh * ow, c * kh * kw) @ weight.reshape(cout, -1).T  # (n*oh*ow, cout)
    return y.reshape(n, oh, ow, cout).transpose(0, 3, 1, 2)  # (n, cout, oh, ow)


def _conv_transpose(x, weight, bias=None, pad=None, output_shape=None, pad_type="valid", strides=None,
                    dilations=None, groups=1, **_):
    """The adjoint of conv: every input pixel scatters its kernel-weighted copy into the output.

    The uncropped result has (in - 1) * stride + (k - 1) * dilation + 1 pixels per axis; `pad` crops it
    (custom), `same` crops it to in * stride, and an `output_shape` longer than the cropped length
    (PyTorch's output_padding) extends it at the end with zeros (bias only).
    """
    if x.ndim == 3:  # 1-D: run over a height of 1
        shape = None if output_shape is None else [*ints(output_shape)[:2], 1, ints(output_shape)[2]]
        y = _conv_transpose(x[:, :, None], weight[:, :, None], bias, None if pad is None else [0, 0, *ints(pad)],
                            shape, pad_type, _height_one(strides), _height_one(dilations), groups)
        return y[:, :, 0]
    if x.ndim != 4:
        raise UnsupportedOpError("conv_transpose", detail=f"rank-{x.ndim} input")
    n, cin, h, w = x.shape
    g = int(groups)
    _, cout_g, kh, kw = weight.shape
    sh, sw = ints(strides) if strides is not None else (1, 1)
    dh, dw = ints(dilations) if dilations is not None else (1, 1)
    full = ((h - 1) * sh + (kh - 1) * dh + 1, (w - 1) * sw + (kw - 1) * dw + 1)
    out = np.zeros((n, g, cout_g, *full), np.float32)
    xg = x.reshape(n, g, cin // g, h, w)
    wg = weight.reshape(g, cin // g, cout_g, kh, kw)
    for i in range(kh):
        for j in range(kw):
            out[..., i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (w - 1) * sw + 1:sw] += \
                np.einsum("ngchw,gco->ngohw", xg, wg[..., i, j], optimize=True)
    out = out.reshape(n, g * cout_g, *full)
    begins, sizes = _transpose_crop(pad_type, pad, output_shape, full, (h, w), (sh, sw))
    widths = [(0, 0), (0, 0)] + [(0, max(b + s - f, 0)) for b, s, f in zip(begins, sizes, full)]
    if any(after for _, after in widths):
        out = np.pad(out, widths)
    out = out[:, :, begins[0]:begins[0] + sizes[0], begins[1]:begins[1] + sizes[1]]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out


def _transpose_crop(pad_type, pad, output_shape, full, spatial, strides):
    """Where conv_transpose's output starts in the uncropped result, and how long it is, per axis."""
    if pad_type == "custom":
        p = ints(pad) if pad is not None else [0] * 4
        begins = [p[0], p[2]]
        sizes = [f - p[2 * i] - p[2 * i + 1] for i, f in enumerate(full)]
    elif pad_type == "valid":
        begins, sizes = [0, 0], list(full)
    elif pad_type == "same":
        sizes = [d * s for d, s in zip(spatial, strides)]
        begins = None
    else:
        raise UnsupportedOpError("conv_transpose", detail=f"pad_type {pad_type!r}")
    if output_shape is not None:
        sizes = ints(output_shape)[2:]
    if begins is None:
        begins = [max(f - s, 0) // 2 for f, s in zip(full, sizes)]
    return begins, sizes


OPS: dict[str, Callable[..., Any]] = {
    "conv": _conv,
    "conv_transpose": _conv_transpose,
}
