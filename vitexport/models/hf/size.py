"""How big an `hf:` model is before it exists: its config's layer counts, its parameters counted on
the meta device (no memory), and the tensors its safetensors headers declare. A config that asks
for absurd depth, or for more parameters than its weights hold, is refused as bad input (exit 2); a
model that fits its weights but not this machine's memory as the machine's limit (exit 3). Without
this, transformers builds a 100,000-layer config layer after layer until memory runs out."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from vitexport.core.errors import SourceError

MAX_LAYERS = 512  # the deepest ViTs have 48 (ViT-22B); more is a typo or a file built to hurt
# Keys that count repeated blocks, in a config or any config nested in it (backbone, vision tower).
LAYER_KEYS = ("num_hidden_layers", "num_layers", "encoder_layers", "decoder_layers", "depths", "n_layers",
              "num_encoder_layers", "num_decoder_layers")
MAX_HEADER = 100 * 2**20  # the safetensors format's own limit on its JSON header
MAX_UNBACKED_BYTES = 256 * 2**20  # parameters the weights do not hold, built only to be refused
HELD = 3  # the model, its checkpoint as read and the artifact being written: held about three times


def check_layers(config: dict[str, Any], where: str) -> None:
    """Refuse a config (or one nested in it) that repeats a block more than MAX_LAYERS times."""
    for key, value in _walk(config):
        counts = value if isinstance(value, list) else [value]
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
            continue
        if sum(counts) > MAX_LAYERS:
            raise SourceError(f"{where}: config.json asks for {sum(counts):,} layers ({key}); vitexport builds "
                              f"models of at most {MAX_LAYERS}: is it a typo?")


def _walk(config: Any, depth: int = 0):
    if not isinstance(config, dict) or depth > 8:
        return
    for key, value in config.items():
        if key in LAYER_KEYS:
            yield key, value
        elif isinstance(value, dict):
            yield from _walk(value, depth + 1)


def check_parameters(cls, config_object, weights: list[Path], where: str) -> None:
    """Count the model's parameters on the meta device and compare them with what the checkpoint
    holds and what this machine has, before a single weight is allocated."""
    import torch

    from vitexport.core.environment import total_memory_bytes
    from vitexport.core.errors import TooLargeHere

    with torch.device("meta"):
        model = cls(config_object)
    needed = sum(p.numel() for p in model.parameters())
    held = sum(_declared_elements(w, where) for w in weights)
    # A few missing tensors are left to transformers, which names them; a model far beyond its weights
    # would be allocated in full only to be refused.
    if 4 * (needed - held) > MAX_UNBACKED_BYTES:
        raise SourceError(f"{where}: config.json describes {needed:,} parameters and the weights hold {held:,}: "
                          "the two do not belong together")
    memory, size = total_memory_bytes(), 4 * needed * HELD
    if memory is not None and size > memory:
        raise TooLargeHere(f"{where}: {needed:,} float32 parameters, held about {HELD} times while exporting, "
                           f"need {size / 1e9:.3g} GB; this machine has {memory / 1e9:.3g} GB")


def _declared_elements(path: Path, where: str) -> int:
    """Elements of every tensor a safetensors file's header declares (the header alone is read)."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > MAX_HEADER:
                raise SourceError(f"{where}: {path.name} declares a header of {length:,} bytes: not safetensors")
            header = json.loads(f.read(length))
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        raise SourceError(f"{where}: {path.name} is not a safetensors file (its header cannot be read)") from None
    if not isinstance(header, dict):
        raise SourceError(f"{where}: {path.name} is not a safetensors file (its header is not an object)")
    total = 0
    for name, entry in header.items():
        shape = entry.get("shape") if isinstance(entry, dict) and name != "__metadata__" else None
        if isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
            total += math.prod(shape)
    return total
