"""`check_built`: the parity check of an artifact built without it (`export(verify=False)`), in place,
against the model already loaded: how optimize checks only the candidates that could win.
May import vitexport.core, models, verify, the backend spec and the export room."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitexport.core.errors import ParityError
from vitexport.core.progress import ProgressLike, as_progress

if TYPE_CHECKING:
    from vitexport.export.pipeline import Gate
    from vitexport.models.sources import LoadedModel


def check_built(path: str | Path, loaded: "LoadedModel", *, images=None, seed: int | None = None,
                gate: "Gate | None" = None, progress: ProgressLike = None) -> dict[str, Any]:
    """Check an artifact exported without its check, in place: its files must still be the ones built
    (ParityError otherwise), its parity is recorded in its sidecar (status verified, FAILED or
    not-checked-here), and the export result is returned. Raises ParityError, carrying the result,
    when the outputs differ; the artifact stays where it is, its sidecar saying FAILED."""
    from vitexport import backends
    from vitexport.export import sidecar
    from vitexport.export.integrity import damaged, integrity_problem
    from vitexport.export.pipeline import result_of, status_of, tolerance
    from vitexport.verify.checks import parity_of

    path = Path(path)
    record = sidecar.read(path)
    be = backends.get(record.backend)
    changed = integrity_problem(be, path, record)
    if changed:
        raise ParityError(damaged(path, changed), result_of(record, path, {}) | {"artifact_modified": True})
    tol = tolerance(be, record.precision, None, None, gate)
    from vitexport.backends.base import DEFAULT_MAX_BATCH

    max_batch = record.options.get("max_batch") or DEFAULT_MAX_BATCH  # as the export's own check (check_max_batch)
    record.parity, record.provider = parity_of(be, loaded, path, record, tol,
                                               record.seed if seed is None else seed, images, max_batch,
                                               as_progress(progress))
    record.status = status_of(record.parity)
    sidecar.write(sidecar.path_for(path), record)
    result = result_of(record, path, {})
    if record.status == "FAILED":
        raise ParityError(f"{be.name} artifact does not match PyTorch: " + "; ".join(record.parity.failures[:3]),
                          result)
    return result


def computes(path: str | Path, loaded: "LoadedModel", *, seed: int, gate: "Gate | None" = None) -> str | None:
    """Whether an artifact computes this model: one seeded input at its smallest checked batch,
    against PyTorch's outputs, within its precision's tolerance. None if it does, else how it differs.
    What a verdict kept from before is trusted on: the files beside the artifact can say anything."""
    from vitexport import backends
    from vitexport.backends.base import DEFAULT_MAX_BATCH
    from vitexport.export import sidecar
    from vitexport.export.pipeline import tolerance
    from vitexport.verify.checks import reference_all
    from vitexport.verify.feeds import check_feeds
    from vitexport.verify.parity import compare

    path = Path(path)
    record = sidecar.read(path)
    be = backends.get(record.backend)
    if not be.runs_here_for(record).ok:
        return None  # it cannot run here: never picked, and nothing here can tell
    batch = be.check_batches(record, record.options.get("max_batch") or DEFAULT_MAX_BATCH)[:1]
    feed = check_feeds(loaded, batch, seed)[0][0]
    name = record.input_names[0]
    (reference,) = reference_all(loaded, name, record.output_names, [feed])
    with be.load(path, record) as runner:
        candidate = runner.run({name: feed.x})
    report = compare([(len(feed.x), feed.name, reference, candidate)],
                     tolerance(be, record.precision, None, None, gate), record.precision)
    return None if report.passed else "; ".join(report.failures[:2])
