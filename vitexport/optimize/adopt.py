"""Publishing a built candidate under its final name by copying its files, then checking the copy,
instead of exporting it again: the export of a candidate built in the helper process
(vitexport.optimize.aside) would start from nothing here (no traced graph, no conversion in this
process's memo: OpenVINO's ViT-B conversion alone takes 15-20 s on 2 vCPUs).

Only a backend that says its artifact stays the same under another name (`Backend.renamable`: no file
names another inside it) is copied; the copy is checked against PyTorch as an export's own check is,
in a staging folder, and published only when it passes. Anything else is exported again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from vitexport.core.errors import ParityError


def adopt(candidate: Path, out: Path, name: str, *, loaded, images, seed: int, gate, progress) -> dict[str, Any] | None:
    """Publish the candidate at `candidate` as NAME in `out`, checked; return the check's result, or
    None when it cannot be published that way (not renamable, or the copy did not pass: the caller
    exports it again, which says why in its own way)."""
    from vitexport import backends
    from vitexport.core.progress import as_progress
    from vitexport.export import sidecar
    from vitexport.export.checking import check_built
    from vitexport.export.staging import publish, staging

    progress = as_progress(progress)
    record = sidecar.read(candidate)
    be = backends.get(record.backend)
    if not be.renamable(candidate, record):
        return None
    with staging(out) as stage:
        final = stage / f"{name}{be.suffix}"
        shutil.copyfile(candidate, final)
        extra = []
        for part in be.files(candidate, record):
            # NAME plus everything after the candidate's stem (NAME.bin for CAND.bin)
            copy = stage / (name + part.name[len(candidate.stem):]) if part.name.startswith(candidate.stem) else None
            if copy is None:
                return None
            shutil.copyfile(part, copy)
            extra.append(copy)
        record.artifact = final.name
        record.files = [p.name for p in extra]
        record.artifact_sha256 = sidecar.digest(final, extra)
        record.published = sorted([final.name, *record.files, sidecar.path_for(final).name])
        record.status, record.parity = "unverified", None
        sidecar.write(sidecar.path_for(final), record)
        if be.files(final, record) != extra:  # the backend looks for other names than the copies'
            return None
        progress.note("checking the copy against PyTorch")
        try:
            result = check_built(final, loaded, images=images, seed=seed, gate=gate, progress=progress)
        except ParityError:
            return None
        if result["status"] != "verified":
            return None
        published = publish(stage, out)
    artifact = next(p for p in published if p.name == f"{name}{be.suffix}")
    return {**result, "artifact": str(artifact)}
