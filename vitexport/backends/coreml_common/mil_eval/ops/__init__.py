"""The op tables: MIL op name -> NumPy implementation, gathered from the family modules.

Each implementation takes the op's inputs as keyword arguments (unknown ones are ignored) and returns
an array, or a tuple of arrays for an op with several outputs.
"""

from __future__ import annotations

from typing import Any, Callable

from vitexport.backends.coreml_common.mil_eval.ops import (activation, compression, conv, dense, elementwise, indexing,
                                                           layout, norm, pool, resize, sample, shape)

# Ops run on every call of a program.
OPS: dict[str, Callable[..., Any]] = {
    **conv.OPS, **dense.OPS, **norm.OPS, **activation.OPS, **pool.OPS, **resize.OPS, **elementwise.OPS,
    **shape.OPS, **layout.OPS, **indexing.OPS, **sample.OPS,
}

# Weight decompression (constexpr_*): run once, when the program is loaded.
DECOMPRESSION_OPS: dict[str, Callable[..., Any]] = compression.OPS

# Ops that only move, pick or compare existing values: on fp16 values their results are fp16 values
# already, so an fp16 program skips the rounding (and a transpose stays a free view).
EXACT_OPS = frozenset({
    "reshape", "transpose", "squeeze", "expand_dims", "concat", "split", "stack", "tile", "pad", "slice_by_index",
    "slice_by_size", "gather", "gather_along_axis", "identity", "relu", "maximum", "minimum", "clip", "select",
    "reduce_max", "reduce_min", "abs", "sign", "floor", "ceil", "round",
    "relu6", "threshold", "thresholded_relu", "max_pool", "upsample_nearest_neighbor", "resize_nearest_neighbor",
    "crop", "gather_nd", "slice_update", "topk", "reverse", "reverse_sequence", "band_part", "depth_to_space",
    "space_to_depth", "pixel_shuffle", "pixel_unshuffle", "space_to_batch", "batch_to_space", "sliding_windows",
    "flatten2d", "reshape_like",
})

__all__ = ["DECOMPRESSION_OPS", "EXACT_OPS", "OPS"]
