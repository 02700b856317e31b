"""The int8 accuracy search of the backends that quantize per encoder block (ONNX, OpenVINO): an int8
artifact that failed its check is tried again with one more unit in float, the one (an encoder block,
or the stem before the first block) that adds the most error."""

from __future__ import annotations

from typing import Any, Callable


def keep_most_sensitive(loaded, options: Any, record, rank: Callable[[Any], Any],
                        scopes_of: Callable[[str], tuple[str, ...]]) -> tuple[Any, str] | None:
    """The options with the next unit kept in float, and a note saying which and why; None when there
    is nothing left to try. `rank(x)` orders units by the error each adds on inputs `x` (most first;
    a string when it cannot tell); `scopes_of(unit)` are the scopes that keep that unit in float."""
    if options.precision != "int8":
        return None
    from dataclasses import replace

    from vitexport.verify.feeds import random_pixels

    pre = loaded.preprocessing
    x = random_pixels((4, *loaded.input_shape[1:]), 1, pre.get("mean"), pre.get("std"))
    if not record.dynamic_batch:
        x = x[:loaded.input_shape[0]]
    ranked = rank(x)
    if isinstance(ranked, str):
        return None
    for unit, added in ranked:
        scopes = scopes_of(unit)
        if scopes and not set(scopes) <= set(options.search_keep):
            note = f"keeping {unit} in float (it adds {added:.3g} relative error)"
            return replace(options, search_keep=options.search_keep + tuple(scopes)), note
    return None  # every block and the stem are float already
