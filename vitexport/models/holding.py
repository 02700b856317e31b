"""Letting go of a loaded model while an export still runs, and building it again if asked.

An export's check computes PyTorch's outputs first; then the model's last use is over, and the runtime
that loads the artifact should not share the memory with a second copy of the weights. A failed
check may still want the model (the divergence localization, the accuracy search): it is built again
from its spec, and must be the model that was let go, since the outputs already computed are its
outputs. A fingerprint of its parameters (names, shapes, a sample of values) taken before letting it
go says so, without hashing every weight of a big model: a factory that draws unseeded random
weights builds another model, and is refused rather than compared with it.
"""

from __future__ import annotations

import gc
import hashlib
from typing import TYPE_CHECKING, Any, Callable

from vitexport.core.errors import SourceError, WeightsError
from vitexport.core.peakmem import trim_heap

if TYPE_CHECKING:
    from vitexport.models.sources import LoadedModel

SAMPLE = 64  # values read from each tensor, spread over it


def fingerprint(model) -> str:
    """sha256 over every parameter's and buffer's name, dtype and shape and a spread sample of its values."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            flat = tensor.detach().reshape(-1)
            h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
            if flat.numel():
                picks = torch.linspace(0, flat.numel() - 1, min(SAMPLE, flat.numel())).long()
                h.update(flat[picks].float().cpu().numpy().tobytes())
    return h.hexdigest()


def release(loaded: "LoadedModel") -> None:
    """Let go of `loaded`'s model and of what was made from it (a backend's converted graph, a file's
    bytes), keeping PyTorch's outputs already computed. A model the caller holds (one in memory) stays
    where the caller has it: only this record's references go."""
    if loaded._model is None:
        return
    loaded._fingerprint = fingerprint(loaded._model)
    loaded._model, loaded.released = None, True
    for key in [k for k in loaded.memo if not (isinstance(k, tuple) and k and k[0] == "reference")]:
        del loaded.memo[key]
    gc.collect()  # traced and exported graphs hold the weights through reference cycles
    trim_heap()  # what the exporter freed goes back to the system before the runtime loads


def rebuilt(loaded: "LoadedModel", load: Callable[[Any], "LoadedModel"]):
    """The released model built again from its spec by `load` (sources.load); refused when it is not
    the same model."""
    again = load(loaded.spec)
    if again.weights_sha256 != loaded.weights_sha256:
        raise WeightsError(f"{loaded.spec.weights or loaded.spec.model} changed while it was being exported")
    if fingerprint(again.model) != loaded._fingerprint:
        raise SourceError(f"{loaded.spec.model} does not build the same model twice (random weights without a "
                          "seed?): pass --weights, or keep the model in memory (api.export)")
    return again.model


def model_of(loaded: "LoadedModel", load: Callable[[Any], "LoadedModel"]):
    """`LoadedModel.model`: the model, built again first (by `load`) when it was released."""
    if loaded._model is None and loaded.released:
        loaded._model, loaded.released = rebuilt(loaded, load), False
    return loaded._model


def set_model(loaded: "LoadedModel", model) -> None:
    loaded._model, loaded.released = model, False
