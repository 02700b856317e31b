"""What a cell depends on, hashed into its cache key: a cell is redone exactly when one of these changed.

- an export (export + verify): the model spec and the contents of every file it reads (weights, an
  `hf:` folder, the model's Python file), the backend and its options (and the contents of files they
  name), the checks (images, tolerances, gate, seed) and the versions of the tools that build it;
- a timing: the export's key and its artifact's sha256, the bench target, batch and settings, the
  device's name and the fingerprint of the machine that times it (CPU, GPU, libraries, Jetson power
  mode; not the time of day).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from vitexport.matrix.plan import Check, Model, Plan, Target, names_a_path

SCHEMA = "vitexport.matrix/1"
# Facts of a fingerprint that change from one run to the next without the machine changing.
VOLATILE = ("timestamp", "threads", "thread_env")


def digest(value: Any) -> str:
    """sha256 of a JSON value, independent of key order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Digests:
    """Contents digests of files and folders, each read once per run (a checkpoint can be gigabytes),
    and each backend's tool versions, read once per run (each read scans every installed distribution:
    about 0.1 s, which every export of a large plan would pay again)."""

    def __init__(self):
        self.seen: dict[tuple, str] = {}
        self.versions: dict[str, dict[str, str]] = {}

    def tools(self, backend: str) -> dict[str, str]:
        if backend not in self.versions:
            self.versions[backend] = tool_versions(backend)
        return dict(self.versions[backend])

    def of(self, path: str | Path) -> str | None:
        """sha256 over a file, or over a folder's files and their relative names; None if it is gone."""
        from vitexport.core.environment import sha256_file

        path = Path(path)
        if path.is_file():
            files = [(path.name, path)]
        elif path.is_dir():
            files = sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*") if p.is_file())
        else:
            return None
        h = hashlib.sha256()
        for name, file in files:
            stat = file.stat()
            memo = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
            if memo not in self.seen:
                self.seen[memo] = sha256_file(file)
            h.update(f"{name}\0{self.seen[memo]}\n".encode())
        return h.hexdigest()


def model_files(model: Model, digests: Digests) -> dict[str, str | None]:
    """Digests of the files a model spec reads besides code vitexport ships: its weights, its `hf:`
    folder, its Python file or module."""
    spec = model.spec
    files: dict[str, str | None] = {}
    if spec.weights:
        files["weights"] = digests.of(spec.weights)
    prefix, _, rest = spec.model.partition(":")
    if prefix == "hf":
        files["hf"] = digests.of(rest)
    elif prefix.endswith(".py"):
        files["code"] = digests.of(prefix)
    elif rest and prefix not in ("torchvision", "timm"):
        origin = module_origin(prefix)
        files["code"] = digests.of(origin) if origin else None
    return files


def module_origin(name: str) -> str | None:
    """The file of an importable module, found without running it (its parent packages do run)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return found.origin if found and found.origin and os.path.isfile(found.origin) else None


def option_files(target: Target, digests: Digests) -> dict[str, str | None]:
    import dataclasses

    return {f.name: digests.of(getattr(target.options, f.name)) for f in dataclasses.fields(target.options)
            if names_a_path(f) and isinstance(getattr(target.options, f.name), str)}


def tool_versions(backend: str) -> dict[str, str]:
    """Versions of what builds and checks this backend's artifacts (its upstream's too), not of every
    backend: a new Core ML does not redo ONNX exports."""
    from vitexport import backends
    from vitexport.core.environment import BASE_PACKAGES, versions

    names, be = list(BASE_PACKAGES), backends.get(backend)
    while be is not None:
        names += [n for n in be.tool_packages if n not in names]
        be = backends.get(be.builds_from) if be.builds_from else None
    return versions(tuple(names))


def export_inputs(plan: Plan, model: Model, target: Target, digests: Digests) -> dict[str, Any]:
    check: Check = plan.check
    return {
        "schema": SCHEMA, "kind": "export",
        "model": model.spec.to_dict(), "model_files": model_files(model, digests),
        "backend": target.backend, "options": target.options.to_dict(), "option_files": option_files(target, digests),
        "check": {"images": digests.of(check.images) if check.images else None, "atol": check.atol,
                  "rtol": check.rtol, "min_top1_agreement": check.min_top1_agreement,
                  "max_accuracy_drop": check.max_accuracy_drop, "seed": plan.seed},
        "tools": digests.tools(target.backend),
    }


def stable_fingerprint(fingerprint: dict) -> dict:
    """A machine's fingerprint without what changes between runs of the same machine."""
    return {k: v for k, v in fingerprint.items() if k not in VOLATILE}


def timing_inputs(export_key: str, artifact_sha256: str, bench_target: str, batch: int, settings: dict,
                  seed: int, device: str, fingerprint: dict) -> dict[str, Any]:
    return {"schema": SCHEMA, "kind": "timing", "export": export_key, "artifact_sha256": artifact_sha256,
            "bench_target": bench_target, "batch": batch, "settings": settings, "seed": seed, "device": device,
            "machine": stable_fingerprint(fingerprint)}
