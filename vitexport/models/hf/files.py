"""What a `save_pretrained` directory holds: its config, its safetensors weights (and their sha256,
which sidecars record like a --weights file's), its image processor's config."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from vitexport.core.environment import sha256_file
from vitexport.core.errors import SourceError
from vitexport.core.jsonfile import read_json

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"  # large checkpoints are split into shards it lists
PROCESSOR = "preprocessor_config.json"


def directory(text: str) -> Path:
    """The folder an `hf:` spec names; never a hub id: nothing is ever downloaded."""
    if not text:
        raise SourceError("hf: needs a directory, e.g. hf:path/to/vit-base-patch16-224")
    path = Path(text)
    if not path.is_dir():
        raise SourceError(f"hf:{text} is not a directory; vitexport reads folders written by save_pretrained and "
                          "never downloads (fetch a hub model first: hf download ID --local-dir DIR)")
    if not (path / CONFIG).is_file():
        raise SourceError(f"hf:{text} has no {CONFIG}: not a save_pretrained directory")
    return path


def read_config(path: Path) -> dict[str, Any]:
    config = read_json(path / CONFIG, "hf: model file", error=SourceError)
    if not isinstance(config, dict):
        raise SourceError(f"hf:{path}: {CONFIG} is not a JSON object")
    return config


def architecture_of(path: Path, config: dict[str, Any]) -> str:
    names = config.get("architectures")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise SourceError(f"hf:{path}: {CONFIG} names no architecture (its `architectures` list is missing)")
    return names[0]


def weights_files(path: Path) -> list[Path]:
    """model.safetensors, or the shards its index lists. Pickled `pytorch_model.bin` files are not read."""
    single, index = path / WEIGHTS, path / SHARD_INDEX
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            shards = sorted(set(read_json(index, "hf: model file", error=SourceError)["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as e:
            raise SourceError(f"hf:{path}: {SHARD_INDEX} is damaged ({type(e).__name__}: {e})") from None
        files = [path / name for name in shards]
        if not files or any(Path(name).name != name or not f.is_file() for name, f in zip(shards, files)):
            raise SourceError(f"hf:{path}: {SHARD_INDEX} lists shards that are not files in the directory")
        return files
    raise SourceError(f"hf:{path} has no {WEIGHTS}; vitexport reads safetensors only (re-save the model with "
                      "save_pretrained, which writes safetensors)")


def weights_identity(text: str) -> tuple[str, str]:
    """(what to call the weights, sha256): one file's digest, as for --weights, or one over every shard."""
    files = weights_files(directory(text))
    if len(files) == 1:
        return str(files[0]), sha256_file(files[0])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}:{sha256_file(f)}\n".encode())
    return f"{Path(text) / SHARD_INDEX} shards", digest.hexdigest()
