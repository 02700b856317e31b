"""Weights for a built model: a checkpoint read safely (.safetensors, or a torch file loaded with
`weights_only=True` unless the user allows pickles) and loaded only when every key fits, after the
prefix a training wrapper adds is removed."""

from __future__ import annotations

from pathlib import Path

from vitexport.core.environment import sha256_file
from vitexport.core.errors import WeightsError


def read_state_dict(path: Path, allow_pickle: bool) -> dict:
    import torch

    if not path.is_file():
        raise WeightsError(f"weights file {path} is not a regular file" if path.exists() else
                           f"weights file not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as e:
            raise WeightsError(f"corrupt safetensors file {path}: {e}") from None
    _check_archive(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except Exception as e:  # torch raises many types for bad pickles/zips
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "Unsupported global" in str(e):
            raise WeightsError(f"{path} holds pickled Python objects; refusing to unpickle it. "
                               "Re-save it as safetensors, or pass --allow-pickle if you trust its origin") from None
        detail = "" if "Weights only load failed" in text else f" ({text[:120]})"  # torch's text is a page long
        raise WeightsError(f"cannot read checkpoint {path}: not a valid torch checkpoint{detail}") from None
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WeightsError(f"{path} does not contain a state dict of tensors")
    return obj


def _check_archive(path: Path) -> None:
    """A zip-format checkpoint (torch's since 1.6) within the sizes it declares; an older one is a
    pickle stream, read by torch as it is."""
    import zipfile

    from vitexport.core.archives import check_declared_sizes

    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                check_declared_sizes(archive, f"weights file {path.name}")
        except (zipfile.BadZipFile, OSError, ValueError):
            return  # torch's reader says what is wrong with it


# Training wrappers put these before every key: DistributedDataParallel `module.`, Lightning and EMA
# wrappers `model.`. Official torchvision and timm files carry neither.
WRAPPER_PREFIXES = ("module.", "model.")


def load_weights(model, path: Path, allow_pickle: bool) -> tuple[str, str | None]:
    """Load a checkpoint whose keys fit the model exactly, or do so once a training wrapper's prefix
    is removed; return its sha256 and a note saying when the prefix was removed."""
    state = read_state_dict(path, allow_pickle)
    problems = _load_fitting(model, state)
    if not problems:
        return sha256_file(path), None
    for prefix in WRAPPER_PREFIXES:
        if state and all(k.startswith(prefix) for k in state) and not _load_fitting(model, _strip(state, prefix)):
            return sha256_file(path), (f"weights {path.name}: every key began with '{prefix}' (a training "
                                       "wrapper's prefix); removed it, and then every key fit the model")
    raise WeightsError(f"weights {path.name} do not fit the model; " + "; ".join(problems))


def _load_fitting(model, state: dict) -> list[str]:
    """Load `state` into `model` if every key fits; else say which do not (a partial load is left
    behind, which the caller discards or overwrites). Missing and unexpected keys are judged by the
    model's own load hooks, so a layout the model still accepts fits: torchvision renames the MLP keys
    of its pre-0.14 releases (`mlp.linear_1` -> `mlp.0`), which the official ViT checkpoints use."""
    own = model.state_dict()
    mismatched = sorted(k for k in own.keys() & state.keys() if tuple(own[k].shape) != tuple(state[k].shape))
    fitting = type(state)((k, v) for k, v in state.items() if k not in mismatched)
    if hasattr(state, "_metadata"):  # per-module versions, which the load hooks read
        fitting._metadata = state._metadata
    try:
        result = model.load_state_dict(fitting, strict=False)
    except RuntimeError as e:  # a key renamed by a hook has the wrong shape; torch names it
        lines = [line.strip() for line in str(e).splitlines() if "size mismatch" in line]
        return [f"shape mismatch: {lines[0] if lines else str(e).splitlines()[0]}"]
    problems = []
    for label, keys in (("missing", sorted(set(result.missing_keys) - set(mismatched))),
                        ("unexpected", sorted(result.unexpected_keys)), ("shape mismatch", mismatched)):
        if keys:
            shown = ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")
            problems.append(f"{label}: {shown}")
    return problems


def _strip(state: dict, prefix: str) -> dict:
    """`state` without `prefix` on its keys, its per-module metadata renamed alike."""
    stripped = type(state)((k[len(prefix):], v) for k, v in state.items())
    metadata = getattr(state, "_metadata", None)
    if metadata is not None:
        stripped._metadata = type(metadata)(
            ("" if k == prefix[:-1] else k[len(prefix):] if k.startswith(prefix) else k, v)
            for k, v in metadata.items())
    return stripped
