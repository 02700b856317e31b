"""Dense compute ops: convolution, linear/matmul/einsum, attention, softmax, normalisation, activations."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.ops.args import as_axes, ints
from vitexport.backends.coreml_common.mil_eval.ops.elementwise import erf

SQRT2 = math.sqrt(2.0)  # Python floats keep float32 arrays float32 (a NumPy float64 scalar would promote)


# --- convolution ------------------------------------------------------------------------------------

def _conv_padding(pad_type, pad, spatial, kernel, strides, dilations) -> list[tuple[int, int]]:
    """(before, after) padding per spatial axis."""
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
    raise UnsupportedOpError("conv", detail=f"pad_type {pad_type!r}")


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
    (top, bottom), (left, right) = _conv_padding(pad_type, pad, (h, w), (kh, kw), (sh, sw), (dh, dw))
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


# --- linear algebra and attention -------------------------------------------------------------------

def _linear(x, weight, bias=None, **_):
    # One 2-D GEMM over all leading dims: faster than a stacked matmul.
    y = (x.reshape(-1, x.shape[-1]) @ weight.T).reshape(*x.shape[:-1], weight.shape[0])
    if bias is not None:
        y += bias  # in place: large temporaries cost page faults, not just arithmetic
    return y


def _matmul(x, y, transpose_x=False, transpose_y=False, **_):
    if transpose_x:
        x = np.swapaxes(x, -1, -2)
    if transpose_y:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _einsum(values, equation, **_):
    return np.einsum(str(equation), *values, optimize=True)


def _softmax(x, axis=-1, **_):
    z = x - x.max(axis=int(axis), keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=int(axis), keepdims=True)
    return z


def _sdpa(query, key, value, attn_mask=None, **_):
    scores = np.matmul(query, np.swapaxes(key, -1, -2))  # (..., L, S)
    scores *= 1.0 / math.sqrt(query.shape[-1])
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf) if attn_mask.dtype == np.bool_ else scores + attn_mask
    return np.matmul(_softmax(scores, axis=-1), value)


# --- normalisation and activations ------------------------------------------------------------------

def _layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_):
    ax = as_axes(axes, x.ndim) or (x.ndim - 1,)
    y = x - x.mean(axis=ax, keepdims=True)
    variance = np.square(y).mean(axis=ax, keepdims=True)
    y /= np.sqrt(variance + float(epsilon))
    if gamma is not None:
        y *= gamma
    if beta is not None:
        y += beta
    return y


def _batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_):
    shape = (1, -1) + (1,) * (x.ndim - 2)  # per channel (axis 1)
    y = (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + float(epsilon))
    if gamma is not None:
        y = y * gamma.reshape(shape)
    return y + beta.reshape(shape) if beta is not None else y


def _gelu(x, mode="EXACT", **_):
    # One temporary, updated in place: an MLP's activations are the largest tensors in a ViT.
    if mode == "EXACT":  # 0.5 x (1 + erf(x / sqrt 2))
        y = x * (1.0 / SQRT2)
        erf(y, out=y)
    elif mode == "TANH_APPROXIMATION":  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        y = x * x
        y *= 0.044715
        y += 1.0
        y *= x
        y *= math.sqrt(2.0 / math.pi)
        np.tanh(y, out=y)
    elif mode == "SIGMOID_APPROXIMATION":  # x sigmoid(1.702 x) = 0.5 x (1 + tanh(0.851 x))
        return x * _sigmoid(1.702 * x)
    else:
        raise UnsupportedOpError("gelu", detail=f"mode {mode!r}")
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _sigmoid(x, **_):
    return 1.0 / (1.0 + np.exp(-x))


OPS: dict[str, Callable[..., Any]] = {
    # compute
    "conv": _conv,
    "linear": _linear,
    "matmul": _matmul,
    "einsum": _einsum,
    "scaled_dot_product_attention": _sdpa,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    # activations
    "gelu": _gelu,
    "relu": lambda x, **_: np.maximum(x, 0),
    "silu": lambda x, **_: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "leaky_relu": lambda x, alpha=0.01, **_: np.where(x >= 0, x, x * float(alpha)),
}
