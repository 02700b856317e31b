"""A package's manifest.json: sha256 and size of every other file in the folder, the versions that
made it, the target, the artifact and how the check runs it. Its own sha256 names the package: a
device report carries it, so a report is judged only against the package it came from.

A folder is vitexport's to replace when it holds a readable manifest of this schema (or is empty,
or is a Jetson bundle of earlier versions, known by its bundle.json); anything else is the user's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitexport.core import writer
from vitexport.core.environment import NotARegularFile, sha256_file
from vitexport.core.errors import UsageError
from vitexport.core.jsonfile import read_json

SCHEMA = "vitexport.package/1"
NAME = "manifest.json"
MAX_BYTES = 16 * 2**20  # a manifest lists a few hundred files at most


def file_entries(folder: Path) -> dict[str, dict[str, Any]]:
    """Every file under `folder` but the manifest, by its path relative to it (with '/')."""
    entries = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        name = path.relative_to(folder).as_posix()
        if name != NAME:
            entries[name] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    return entries


def write(folder: Path, content: dict[str, Any]) -> str:
    """Write manifest.json (the files listed now, so it is written last); return its sha256."""
    data = {"schema": SCHEMA, **content, "files": file_entries(folder)}
    writer.fill(folder / NAME, json.dumps(data, indent=2) + "\n")
    return sha256_file(folder / NAME)


def read(folder: Path) -> dict[str, Any]:
    """The manifest of the package `folder`; UsageError (exit 2) when it is not one."""
    path = Path(folder) / NAME
    if not path.exists():
        raise UsageError(f"{folder} is not a vitexport package (it has no {NAME})")
    from vitexport.core import schemas

    data = read_json(path, "package manifest", max_bytes=MAX_BYTES)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{path} is not a vitexport package manifest (schema {SCHEMA})")
    # Every field (file names inside the package, sha256, sizes, target) against the manifest's schema.
    return schemas.check("package-manifest", data, f"{path} is damaged")


def digest(folder: Path) -> str:
    return sha256_file(Path(folder) / NAME)


def changed(folder: Path, manifest: dict[str, Any], names: list[str] | None = None) -> str | None:
    """The first of `names` (default: every listed file) whose size or sha256 is not the manifest's,
    as a sentence; None when all match."""
    files = manifest["files"]
    for name in names if names is not None else sorted(files):
        if name not in files:
            return f"{name} is not in its manifest"
        path = Path(folder).joinpath(*name.split("/"))
        try:
            same = path.stat().st_size == files[name]["size"] and sha256_file(path) == files[name]["sha256"]
        except FileNotFoundError:
            return f"{name} is missing"
        except (NotARegularFile, OSError) as e:
            return f"{name} cannot be read ({e})"
        if not same:
            return f"{name}: sha256 differs from manifest.json"
    return None


def is_ours(folder: Path) -> bool:
    """Whether vitexport may replace `folder`: an earlier package (its manifest readable), an empty
    folder, or a Jetson bundle of earlier vitexport versions. Never a link or a file."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return False
    if not any(folder.iterdir()):
        return True
    try:
        read(folder)
        return True
    except UsageError:
        pass
    bundle = folder / "bundle.json"
    if bundle.is_file() and not bundle.is_symlink():
        try:
            old = read_json(bundle, "bundle", max_bytes=MAX_BYTES)
        except UsageError:
            return False
        return isinstance(old, dict) and {"trtexec", "input_name", "precision"} <= set(old)
    return False

