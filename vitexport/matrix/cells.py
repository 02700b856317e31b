"""The work of one cell, wherever it runs (a local worker process, a Ray task): an export (export and
verify through `vitexport.export.pipeline.export`) or a timing (`vitexport.bench.run.bench` on the exported
artifact).

Jobs and results are plain JSON-able dicts, so they cross pipes and Ray unchanged. A result's
`status`: an export is `passed` (verified), `failed` (its check failed: parity or the accuracy gate),
`unchecked` (built, but it only runs elsewhere), `unavailable` (its backend cannot run here) or
`error`; a timing is `timed`, `unavailable` (the bench target cannot run here) or `error`. Artifacts
travel between machines as their bytes (`pack`, `unpack`), checked against their sidecar on arrival.
"""

from __future__ import annotations

import dataclasses
import time
import types
import typing
from pathlib import Path
from typing import Any

from vitexport.core.errors import explained
from vitexport.core import writer

EXPORT_STATUS = {"verified": "passed", "not-checked-here": "unchecked", "FAILED": "failed"}


def run(kind: str, job: dict) -> dict:
    return {"export": export_cell, "timing": timing_cell}[kind](job)


def export_cell(job: dict) -> dict:
    """job: backend, spec (SourceSpec.to_dict()), options (Options.to_dict()), out, images, atol, rtol,
    min_top1_agreement, max_accuracy_drop, seed."""
    from vitexport import backends
    from vitexport.core.errors import BackendUnavailable, ParityError
    from vitexport.export import pipeline
    from vitexport.models.sources import SourceSpec

    t0 = time.perf_counter()
    be = backends.get(job["backend"])
    try:
        result = pipeline.export(job["backend"], SourceSpec.from_dict(job["spec"]), options_from(be, job["options"]),
                            job["out"], verify=True, atol=job.get("atol"), rtol=job.get("rtol"), seed=job["seed"],
                            images=job.get("images"),
                            gate=pipeline.Gate(min_top1_agreement=job.get("min_top1_agreement"),
                                          max_accuracy_drop=job.get("max_accuracy_drop")))
        status = EXPORT_STATUS.get(result["status"], "error")
        reason = (result.get("parity") or {}).get("skipped") if status == "unchecked" else None
    except ParityError as e:
        result, status, reason = e.result or None, "failed", str(e)
    except BackendUnavailable as e:
        result, status, reason = None, "unavailable", str(e)
    except Exception as e:  # one cell's error is its own: the matrix goes on
        result, status, reason = None, "error", describe(e)
    return {"status": status, "reason": reason, "result": result, "seconds": time.perf_counter() - t0}


def timing_cell(job: dict) -> dict:
    """job: artifact, bench_target, batch, settings (plan.Bench.settings()), seed, device, scratch (a
    folder for the bench's own report files, removed afterwards)."""
    from vitexport.bench.run import bench
    from vitexport.core.errors import BackendUnavailable, RuntimeFailure
    from vitexport.export.staging import staging

    t0 = time.perf_counter()
    s = job["settings"]
    try:
        with staging(Path(job["scratch"])) as scratch:
            report = bench(None, [job["bench_target"]], [job["batch"]], artifacts=[job["artifact"]],
                               threads=s["threads"], warmup_iters=s["warmup_iters"], warmup_s=s["warmup_s"],
                               iters=s["iters"], budget_s=s["budget_s"], rounds=s["rounds"], roofline=s["roofline"],
                               seed=job["seed"], out_dir=scratch, label=job["device"],
                               trust_code=True)  # the plan names the model: its code is the user's own request
    except (BackendUnavailable, RuntimeFailure) as e:  # nothing could be timed: the report says why
        report = getattr(e, "result", None)
        if not isinstance(report, dict):
            return {"status": "error", "reason": describe(e), "rows": [], "machine": None,
                    "seconds": time.perf_counter() - t0}
    except Exception as e:
        return {"status": "error", "reason": describe(e), "rows": [], "machine": None,
                "seconds": time.perf_counter() - t0}
    rows = report["results"]
    missing = [r for r in rows if not r.get("available")]
    machine = {k: report.get(k) for k in ("fingerprint", "settings", "roofline", "roofline_int8", "roofline_cuda")}
    status = "timed" if not missing else "error" if any(r.get("failed") for r in missing) else "unavailable"
    return {"status": status, "reason": missing[0].get("reason") if missing else None,
            "rows": rows, "machine": machine, "conditions": report.get("conditions"),
            "seconds": time.perf_counter() - t0}


def options_from(be, values: dict) -> Any:
    """The backend's Options from their JSON form (lists back to tuples)."""
    hints = typing.get_type_hints(be.Options)
    fields = {f.name for f in dataclasses.fields(be.Options)}
    return be.Options(**{k: tuple(v) if isinstance(v, list) and typing.get_origin(_bare(hints[k])) is tuple else v
                         for k, v in values.items() if k in fields})


def _bare(hint):
    """`tuple[str, ...]` from `tuple[str, ...] | None`."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and args else hint


def describe(error: BaseException) -> str:
    """One line: vitexport's own messages as they are, anything else with its type."""
    from vitexport.core.errors import VitexportError

    text = explained(error)
    return text if isinstance(error, VitexportError) else f"{type(error).__name__}: {text}"


# ----------------------------------------------------------------------------------- artifacts as bytes

def pack(artifact: Path) -> dict:
    """An artifact, its other files and its sidecar as bytes, with the sha256 its sidecar records."""
    from vitexport import backends
    from vitexport.export import sidecar

    artifact = Path(artifact)
    record = sidecar.read(artifact)
    be = backends.get(record.backend)
    paths = sorted(p for p in artifact.rglob("*") if p.is_file()) if artifact.is_dir() else [artifact]
    paths += [p for p in be.files(artifact, record) if p.is_file()] + [sidecar.path_for(artifact)]
    files = [(p.relative_to(artifact.parent).as_posix(), p.read_bytes()) for p in paths]
    return {"artifact": artifact.name, "sha256": record.artifact_sha256, "files": files}


def unpack(packed: dict, folder: Path) -> Path:
    """Write a packed artifact into `folder` and prove it is the one packed: its files hash to its
    sidecar's sha256, which is the one the sender read. Raises ParityError (a damaged artifact)."""
    from vitexport import backends
    from vitexport.core.errors import ParityError
    from vitexport.export import sidecar
    from vitexport.export.integrity import integrity_problem

    folder = Path(folder)
    for name, data in packed["files"]:
        target = folder / name
        outside = not target.resolve().is_relative_to(folder.resolve())
        if Path(name).is_absolute() or ".." in Path(name).parts or outside:
            raise ParityError(f"refusing a packed file outside its folder: {name!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        writer.fill(target, data)
    path = folder / packed["artifact"]
    record = sidecar.read(path)
    problem = integrity_problem(backends.get(record.backend), path, record)
    if problem is None and record.artifact_sha256 != packed["sha256"]:
        problem = "its sidecar is not the one sent"
    if problem:
        raise ParityError(f"{path.name} arrived damaged ({problem})")
    return path
