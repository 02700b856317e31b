"""Reading op arguments: MIL passes ints, shapes and axes as arrays."""

from __future__ import annotations

import numpy as np


def ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def as_axes(axes, rank: int) -> tuple[int, ...] | None:
    return None if axes is None else tuple(a % rank for a in ints(axes))
