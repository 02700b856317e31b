"""`vitexport package ARTIFACT --target T`: a deploy package from an exported artifact and its sidecar.

The artifact must be whole (its files match the sidecar's sha256) and must not have failed its
check; the model is rebuilt from the sidecar, under the same rules as `verify` (code named in the
sidecar needs --trust-code, pickled checkpoints --allow-pickle), to compute the golden outputs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from vitexport.core.errors import ParityError, UsageError
from vitexport.core.progress import ProgressLike, using
from vitexport.deploy import target as device_target
from vitexport.deploy.build import write_package


def package(artifact: str | Path, target: str, *, images: str | Path | None = None, out_dir: str | Path | None = None,
            trust_code: bool = False, allow_pickle: bool = False, force: bool = False,
            runtime_from: str | Path | None = None, progress: ProgressLike = None) -> dict[str, Any]:
    """Write `OUT/NAME-BACKEND-TARGET/` for the artifact at `artifact` (OUT: `out_dir`, default the
    artifact's folder); return what --json prints. `runtime_from`: a copy of the runtime the package
    carries (web: ONNX Runtime Web's .tgz or folder). Raises UsageError for what cannot be packaged,
    ParityError (exit 4) for a damaged or failed artifact."""
    from vitexport import backends
    from vitexport.export import sidecar
    from vitexport.export.integrity import damaged, integrity_problem
    from vitexport.export.pipeline import check_weights_unchanged, trusted_spec
    from vitexport.models.sources import load

    where = device_target(target)
    if runtime_from is not None:
        if where.language != "web":
            raise UsageError(f"--runtime-from gives the runtime a web package carries; --target {where.name} carries "
                             "none (the device installs its runtime)")
        if not Path(runtime_from).exists():
            raise UsageError(f"--runtime-from: no such file or folder: {runtime_from}")
        where = replace(where, runtime_from=str(runtime_from))
    path = Path(artifact)
    if images is not None and not Path(images).is_dir():
        raise UsageError(f"--images: not a directory: {images}")
    record = sidecar.read(path)
    be = backends.get(record.backend)
    if record.status == "FAILED":
        raise ParityError(f"{path.name} failed its check against PyTorch (its sidecar says FAILED); package an "
                          "artifact that passed")
    problem = integrity_problem(be, path, record)
    if problem:
        raise ParityError(damaged(path, problem))
    check = be.device_check(path, record, where)  # before the model is rebuilt: says at once what cannot go there
    spec = trusted_spec(record, trust_code, allow_pickle, beside=path)
    check_weights_unchanged(spec, record.source.weights_sha256, path)
    stem = path.name[:-len(be.suffix)] if path.name.endswith(be.suffix) and path.name != be.suffix else path.stem
    folder = Path(out_dir if out_dir is not None else path.parent) / f"{stem}-{be.name}-{where.name}"
    with using(progress) as reporter:
        reporter.step(f"rebuilding {spec.model}")
        loaded = load(spec)
        return write_package(folder, be, path, record, loaded, where, check=check, images=images, force=force,
                             progress=reporter)
