"""fp16 numerics on fp32 arrays: rounding to the nearest fp16 value, and how values are held between ops."""

from __future__ import annotations

import numpy as np

# fp16's normal range as float32 bit patterns of |x|: 2^-14 (smallest normal) to 65504 (largest finite)
FP16_NORMAL_BITS = (0x38800000, 0x477FE000)


def round_fp16(x) -> np.ndarray:
    """float32 -> the nearest fp16 value (ties to even), kept as float32.

    NumPy's float16 cast is scalar code (slower than a ViT's matmuls in total), so values in fp16's
    normal range are rounded on their float32 bits: drop the 13 low mantissa bits, rounding to
    nearest even. The rest (fp16 subnormals, zero, overflow, inf, nan) take NumPy's cast.
    """
    x = np.asarray(x, np.float32)
    if x.ndim == 0:  # ufuncs on 0-d arrays return scalars, which cannot be assigned into
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32)
    low, high = FP16_NORMAL_BITS
    out = bits & 0x7FFFFFFF  # |x|; then one unsigned compare tests both ends (below `low` wraps round)
    out -= low
    odd = out > high - low
    np.right_shift(bits, 13, out=out)
    out &= 1  # the lowest kept bit: a tie rounds to make it 0
    out += 0xFFF
    out += bits
    out &= 0xFFFFE000
    out = out.view(np.float32)
    if odd.any():
        with np.errstate(over="ignore"):  # overflow to inf is what an fp16 engine does too
            out[odd] = x[odd].astype(np.float16).astype(np.float32)
    return out


def hold(value, fp16: bool):
    """How a value is kept between ops: fp16 results rounded to fp16 but held as fp32; float64 as fp32."""
    if isinstance(value, str):
        return value
    array = np.asarray(value)
    if array.dtype == np.float16:
        return array.astype(np.float32)
    if fp16 and array.dtype.kind == "f":
        return round_fp16(array)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    return array
