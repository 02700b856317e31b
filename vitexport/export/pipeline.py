"""Export and verify: resolve the model, build what a backend builds from, export into a staging
folder, check against PyTorch, record, publish. Backends only write and run artifacts; everything
they have in common happens here."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitexport import backends
from vitexport.backends.base import Backend, ExportOptions, RunOptions, Upstream
from vitexport.core.errors import (
    BackendUnavailable,
    ExportError,
    ParityError,
    RegressionError,
    RuntimeFailure,
    UsageError,
    VitexportError,
    WeightsError,
)
from vitexport.core.options import check_number
from vitexport.core.peakmem import Stage, merged
from vitexport.core.progress import Progress, ProgressLike, using
from vitexport.export import sidecar
from vitexport.export.integrity import damaged, integrity_problem, not_a_file
from vitexport.export.sidecar import ArtifactRecord
from vitexport.models.sources import LoadedModel, SourceSpec
from vitexport.verify.parity import ParityReport, Tolerance

FAILED_DIR = "failed"  # where an artifact that failed its check is kept for inspection


def export(backend: str, spec: SourceSpec, options: ExportOptions | None = None,
           out_dir: str | Path = "vitexport-out", *, verify: bool = True, atol: float | None = None,
           rtol: float | None = None, seed: int = 0, images: str | Path | None = None, name: str | None = None,
           gate: "Gate | None" = None, force: bool = False, progress: ProgressLike = None,
           loaded: LoadedModel | None = None) -> dict[str, Any]:
    """Export `spec` with `backend` into `out_dir`, verify it against PyTorch, write artifact + sidecar.

    `loaded`: the model already loaded from `spec`, to export again without loading it again (optimize
    builds every candidate from one load, and PyTorch's outputs for the checks are computed once).

    `gate` overrides the precision's accuracy gate on `images` (top-1 agreement, accuracy drop). When
    the check fails and the backend can keep more of the graph in float (`Backend.refine`), the
    export is retried that way until it passes or nothing is left to keep.

    Only an earlier vitexport artifact of the same name is replaced; anything else of that name in
    `out_dir` is refused with OutputError (exit 2) before any work, unless `force`.

    An artifact this machine cannot check (it runs only elsewhere, or holds an op the evaluator here
    lacks) is published and returned with status `not-checked-here` and `parity.skipped` saying why.

    Raises ParityError when the outputs differ; the artifact is then kept under `out_dir/failed/`,
    its sidecar saying FAILED, and whatever verified artifact `out_dir` held under that name stays.
    """
    from vitexport.export.staging import prepare_out_dir
    from vitexport.models.sources import load

    be = backends.get(backend)
    options = options_for(be, options)
    options.validate()
    check_tolerance(atol, rtol)
    gate = gate or Gate()
    gate.check()
    check_name(name)
    if not be.exports:
        raise UsageError(f"{backend} writes no artifact")
    require(be)
    out = prepare_out_dir(out_dir)
    with using(progress) as reporter:
        t0 = time.perf_counter()
        owned, loading = loaded is None or loaded.spec != spec, None
        if owned:  # loaded here: this export is its last use, and may let it go for the check
            reporter.step(f"loading {spec.model}")
            with Stage() as loading:
                loaded = load(spec)
            loaded.exclusive = True
        gate.check(loaded.task)
        load_s = time.perf_counter() - t0
        job = Job(be, loaded, options, out, verify=verify, atol=atol, rtol=rtol, seed=seed, images=images, name=name,
                  gate=gate, progress=reporter, force=force, owns_model=owned,
                  stages={"load": loading.record()} if loading else None)
        result = job.run()
    result["timings"] = {"load_s": load_s, **result["timings"]}
    return result


class Job:
    """One export of a loaded model, and of what its backend builds from first."""

    def __init__(self, be: Backend, loaded: LoadedModel, options: ExportOptions, out: Path, *, verify: bool,
                 atol, rtol, seed: int, images, name: str | None, progress: Progress, gate: "Gate | None" = None,
                 force: bool = False, owns_model: bool = False, stages: dict | None = None):
        self.be, self.loaded, self.options, self.out, self.force = be, loaded, options, out, force
        # Nothing uses the model after this job: its check may let it go (a caller's model stays).
        self.owns_model = owns_model
        self.stages = dict(stages or {})  # each stage's seconds and peak memory, for the sidecar
        self.verify, self.atol, self.rtol, self.seed, self.images = verify, atol, rtol, seed, images
        self.gate = gate or Gate()
        self.given_name = name  # an upstream artifact is named after it, else after the model
        self.name, self.progress = name or loaded.name + be.default_tag(options), progress

    def run(self) -> dict[str, Any]:
        from vitexport.core import writer
        from vitexport.export.staging import check_replaceable, ensure_folder, publish, staging

        be, timings = self.be, {}
        final = self.out / f"{self.name}{be.suffix}"
        inputs = [p for p in (self.loaded.spec.weights, self.images) if p]
        for path in (final, sidecar.path_for(final)):  # the run's own inputs stay, even with --force
            writer.check_target(path, inputs=inputs, force=True)
        if not self.force:  # before any work; publishing checks every file again under its lock
            check_replaceable(self.out, [final.name, sidecar.path_for(final).name])
        upstream = self._upstream() if be.builds_from else None
        with staging(self.out) as stage:
            options, search = self.options, []
            while True:
                self.progress.step(f"exporting {self.name} to {be.name}")
                with Stage() as exporting:
                    artifact = exported(be, self.loaded, options, stage / final.name, upstream)
                timings["export_s"] = timings.get("export_s", 0.0) + exporting.seconds
                self.stages["export"] = merged(self.stages.get("export"), exporting.record())  # a retry adds
                record = new_record(self.loaded, artifact, options, self.seed, upstream)
                if not self.verify:
                    break
                with Stage() as checking:
                    record.parity, record.provider = self._check(artifact.path, record)
                timings["verify_s"] = timings.get("verify_s", 0.0) + checking.seconds
                self.stages["check"] = merged(self.stages.get("check"), checking.record())
                refined = be.refine(self.loaded, options, artifact.path, record) if record.parity.passed is False \
                    else None
                if search or refined:  # what each try kept in float, what it scored, what it cost
                    search.append(attempt(be, artifact.path, record, options))
                if refined is None:
                    break
                self.progress.note(f"check failed; {refined[1]}, then trying again")
                options = refined[0]
                _empty(stage)
            if search:
                record.info["accuracy_search"] = search
            record.info["stages"] = self.stages
            record.status = status_of(record.parity)
            record.files = [p.name for p in be.files(artifact.path, record)]
            record.artifact_sha256 = sidecar.digest(artifact.path, be.files(artifact.path, record))
            side = sidecar.path_for(artifact.path)
            record.published = sorted({p.name for p in stage.iterdir()} | {side.name})
            sidecar.write(side, record)
            target = ensure_folder(self.out / FAILED_DIR) if record.status == "FAILED" else self.out
            publish(stage, target, force=self.force)
        result = result_of(record, target / final.name, timings)
        if record.status == "FAILED":
            raise ParityError(f"{be.name} artifact does not match PyTorch: " + "; ".join(record.parity.failures[:3])
                              + f" (kept for inspection in {target})", result)
        return result

    def _check(self, path: Path, record: ArtifactRecord) -> tuple[ParityReport, str | None]:
        from vitexport.verify.checks import parity_of

        tol = tolerance(self.be, record.precision, self.atol, self.rtol, self.gate)
        return parity_of(self.be, self.loaded, path, record, tol, self.seed, self.images, self.options.check_max_batch,
                         self.progress, release=self.owns_model)

    def _upstream(self) -> Upstream:
        """The verified artifact this backend builds from: reused from the output folder when its
        record matches the request exactly and it passed, else exported (and verified) now."""
        up = backends.get(self.be.builds_from)
        options = self.be.upstream_options(self.options)
        stem = self.given_name or self.loaded.name + up.default_tag(options)  # a dynamic upstream says so too
        path = self.out / f"{stem}{up.suffix}"
        reused = reusable(path, up, self.loaded, options)
        if reused is not None:
            return Upstream(path, reused, f"reused {path.name} (its sidecar matches this request)")
        require(up)
        job = Job(up, self.loaded, options, self.out, verify=True, atol=None, rtol=None, seed=self.seed,
                  images=self.images, name=stem, progress=self.progress, force=self.force)
        result = job.run()
        path = Path(result["artifact"])
        note = f"exported and verified {path.name} (max abs error {result['parity']['max_abs_error']:.3g})"
        return Upstream(path, sidecar.read(path), note)


def reusable(path: Path, be: Backend, loaded: LoadedModel, options: ExportOptions) -> ArtifactRecord | None:
    """The record of an artifact at `path` made from the same model with the same options, verified,
    and unchanged since; None otherwise (a failed or edited artifact is never reused)."""
    if not path.exists() or not sidecar.path_for(path).is_file():
        return None
    try:
        record = sidecar.read(path)
    except UsageError:
        return None
    same = (record.backend == be.name and record.source.spec == loaded.spec.to_dict()
            and record.source.weights_sha256 == loaded.weights_sha256 and record.options == options.to_dict())
    if not same or not record.passed:
        return None
    return record if integrity_problem(be, path, record) is None else None


def exported(be: Backend, loaded, options, out_path: Path, upstream: Upstream | None):
    """The backend's export, with what its libraries raise turned into an ExportError naming them."""
    try:
        return be.export(loaded, options, out_path, upstream)
    except VitexportError:
        raise
    except Exception as e:
        from vitexport.core.usercode import raised

        raise ExportError(f"{be.name} export failed: {raised(e)}") from e


def verify(artifact: str | Path, *, atol: float | None = None, rtol: float | None = None,
           run: RunOptions = RunOptions(), images: str | Path | None = None, max_batch: int | None = None,
           trust_code: bool = False, allow_pickle: bool = False, gate: "Gate | None" = None,
           baseline: str | Path | None = None, max_error_growth: float | None = None,
           progress: ProgressLike = None) -> dict[str, Any]:
    """Re-check an existing artifact against the model recorded in its sidecar.

    An artifact whose files no longer match the sidecar's digest fails (exit 4) whether or not it
    still loads; a sidecar that names Python code to rebuild the model needs `trust_code`, and one
    that asked for unpickling needs `allow_pickle` again: a sidecar is data, not a permission.

    With a `baseline` (an earlier verify or export result), parity numbers worse than it beyond the
    margin (`vitexport.verify.baseline`) raise RegressionError carrying the result and the comparison."""
    from vitexport.verify import baseline as parity_gate

    check_tolerance(atol, rtol)
    gate = gate or Gate()
    gate.check()
    if max_batch is not None:
        check_number(max_batch, "--max-batch", minimum=1, maximum=4096)
    growth = parity_gate.ERROR_GROWTH if max_error_growth is None else max_error_growth
    parity_gate.check_growth(growth)
    old = parity_gate.load_parity_baseline(Path(baseline)) if baseline is not None else None
    if old is not None:
        record = sidecar.read(Path(artifact))  # a baseline of another kind is refused before any work
        parity_gate.check_same_kind(old, record.backend, record.precision, Path(baseline))
    with using(progress) as reporter:
        result = verified(Path(artifact), atol=atol, rtol=rtol, run=run, images=images, max_batch=max_batch,
                          trust_code=trust_code, allow_pickle=allow_pickle, gate=gate, progress=reporter)
    if old is not None:
        result["baseline"] = parity_gate.compare_parity(result, old, Path(baseline), growth)
        if result["baseline"]["regressions"]:
            raise RegressionError(parity_gate.parity_message(result["baseline"]), result)
    return result


def verified(path: Path, *, atol, rtol, run: RunOptions, images, max_batch: int | None, trust_code: bool,
             allow_pickle: bool, gate: "Gate", progress: Progress) -> dict[str, Any]:
    """`verify` without the baseline: the artifact's integrity, then its parity."""
    from vitexport.core import termination
    from vitexport.models.sources import load
    from vitexport.verify.checks import run_checks

    record = sidecar.read(path)
    be = backends.get(record.backend)
    spec = trusted_spec(record, trust_code, allow_pickle, beside=path)
    changed = integrity_problem(be, path, record)
    with termination.held(f"loading {be.name}'s libraries"):  # as for an export (see `require`)
        here = be.runs_here_for(record)
    if changed and (not here.ok or not_a_file(path, be.files(path, record))):  # nothing to run, or it would block
        raise ParityError(damaged(path, changed), result_of(record, path, {}) | {"artifact_modified": True})
    if not here.ok:
        raise BackendUnavailable(f"{record.backend} is unavailable here: {here.reason}")
    check_weights_unchanged(spec, record.source.weights_sha256, path)
    progress.step(f"rebuilding {spec.model}")
    loaded = load(spec)
    if list(loaded.input_shape[1:]) != list(record.input_shape[1:]):
        # The sidecar names a model other than the one exported (an edited spec): nothing to compare.
        raise UsageError(f"sidecar {sidecar.path_for(path).name} is damaged or forged: its model {spec.model} takes "
                         f"input {list(loaded.input_shape[1:])}, its artifact {list(record.input_shape[1:])}")
    gate.check(loaded.task)
    tol = tolerance(be, record.precision, atol, rtol, gate)
    batch_limit = max_batch or record.options.get("max_batch") or 8
    try:
        report, provider = run_checks(loaded, be, path, record, tol, record.seed, run=run, images=images,
                                      max_batch=batch_limit, progress=progress, release=True)
    except Exception as e:  # the artifact would not load or run
        if changed:
            raise ParityError(damaged(path, changed, e), result_of(record, path, {}) | {"artifact_modified": True}) \
                from None
        if isinstance(e, VitexportError):
            raise
        from vitexport.core.usercode import raised

        raise RuntimeFailure(f"{record.backend} could not run {path.name}: {raised(e)}") from e
    record.parity, record.provider, record.status = report, provider, status_of(report)
    result = result_of(record, path, {})
    result["artifact_modified"] = changed is not None
    if changed:
        raise ParityError(damaged(path, changed), result)
    if not report.passed:
        raise ParityError(f"{record.backend} artifact does not match PyTorch: " + "; ".join(report.failures[:3]),
                          result)
    return result


def trusted_spec(record: ArtifactRecord, trust_code: bool, allow_pickle: bool, beside: Path | None = None) -> SourceSpec:
    """The recorded model spec, refused when rebuilding it would import Python code the user has not
    agreed to run; the sidecar's own `allow_pickle` is never honoured. A reference program the spec
    names (`exported:FILE`, a model held in memory at export) is found beside the artifact `beside`."""
    from dataclasses import replace

    from vitexport.models.memory import reference_beside
    from vitexport.models.sources import kind_of, runs_user_code

    try:
        spec = SourceSpec.from_dict(record.source.spec)
    except (TypeError, ValueError) as e:
        raise UsageError(f"the sidecar's model spec is damaged: {e}") from None
    if runs_user_code(spec.model) and not trust_code:
        raise UsageError(f"rebuilding this model imports Python code named in the sidecar ({spec.model}); "
                         "read it, then pass --trust-code to run it")
    if beside is not None and kind_of(spec.model) == "exported":
        spec = replace(spec, model="exported:" + str(reference_beside(spec.model.partition(":")[2], Path(beside))))
    return replace(spec, allow_pickle=allow_pickle)


@dataclass(frozen=True)
class Gate:
    """The user's accuracy gate on --images; None keeps the precision's default."""

    min_top1_agreement: float | None = None
    max_accuracy_drop: float | None = None  # percentage points
    task_gates: dict[str, float] | None = None  # {metric: limit} on the task's numbers (--task-gate)

    def check(self, task: str | None = None) -> None:
        """Each limit in range; with `task` (once the model is loaded), each --task-gate one of its numbers."""
        if self.min_top1_agreement is not None:
            check_number(self.min_top1_agreement, "--min-top1-agreement", minimum=0, maximum=1)
        if self.max_accuracy_drop is not None:
            check_number(self.max_accuracy_drop, "--max-accuracy-drop", minimum=0, maximum=100)
        if self.task_gates:
            from vitexport.verify.tasks import check_gate_overrides

            check_gate_overrides(self.task_gates, task=task)


def attempt(be: Backend, path: Path, record: ArtifactRecord, options: ExportOptions) -> dict[str, Any]:
    """One try of the accuracy search: its options' float keep-list, its verdict and its speed here."""
    from vitexport.core.timing import measure
    from vitexport.verify.feeds import random_pixels

    parity = record.parity
    pre = record.source.preprocessing
    x = random_pixels((1, *record.source.input_shape[1:]), 0, pre.get("mean"), pre.get("std"))
    with be.load(path, record) as runner:
        stats = measure(lambda: runner.run({record.input_names[0]: x}), batch_size=1, warmup_iters=2, warmup_s=0.1,
                        budget_s=0.5)
    images = parity.images
    return {"kept_float": be.kept_float(options), "passed": parity.passed, "failures": parity.failures[:3],
            "cosine_similarity": parity.summary.get("cosine_similarity"),
            "decisive_top1_agreement": images.decisive_top1_agreement if images else None,
            "accuracy_drop": images.accuracy_drop if images else None, "p50_ms_batch1": stats.p50}


def _empty(folder: Path) -> None:
    import shutil

    for entry in folder.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def options_for(be: Backend, options: ExportOptions | None) -> ExportOptions:
    """The backend's own options: given as such, or promoted from the shared ExportOptions."""
    if options is None:
        return be.Options()
    if isinstance(options, be.Options):
        return options
    if type(options) is ExportOptions:
        return be.Options(**options.common())
    raise UsageError(f"{be.name} takes {be.Options.__name__}, not {type(options).__name__}")


def check_name(name: str | None) -> None:
    """--name is a file name stem: no folders, nothing hidden, nothing a shell or another OS chokes on."""
    if name is None:
        return
    if not name or name.startswith(".") or any(c in name for c in '/\\:*?"<>|') or not name.isprintable():
        raise UsageError(f"--name must be a plain file name without folders or special characters, got {name!r}")


def check_tolerance(atol: float | None, rtol: float | None) -> None:
    for flag, value in (("--atol", atol), ("--rtol", rtol)):
        if value is not None:
            check_number(value, flag, minimum=0)


def tolerance(be: Backend, precision: str, atol: float | None, rtol: float | None,
              gate: Gate | None = None) -> Tolerance:
    gate = gate or Gate()
    return be.tolerance(precision).override(atol, rtol, gate.min_top1_agreement, gate.max_accuracy_drop,
                                            gate.task_gates)


def require(be) -> None:
    """BackendUnavailable unless the backend can export here. Its libraries load with signals held: a
    Ctrl-C inside coremltools' import was swallowed there, leaving half-imported modules behind."""
    from vitexport.core import termination

    with termination.held(f"loading {be.name}'s libraries"):
        availability = be.availability()
    if not availability.ok:
        raise BackendUnavailable(f"{be.name} is unavailable here: {availability.reason}")


def status_of(report: ParityReport | None) -> str:
    if report is None:
        return "unverified"
    return {True: "verified", False: "FAILED"}.get(report.passed, "not-checked-here")


def new_record(loaded: LoadedModel, artifact, options: ExportOptions, seed: int,
               upstream: Upstream | None) -> ArtifactRecord:
    from vitexport.backends import tool_versions

    shape = list(loaded.input_shape)
    return ArtifactRecord(
        backend=artifact.backend, artifact=artifact.path.name, source=loaded.describe(), seed=seed,
        precision=artifact.precision, input_names=artifact.input_names, output_names=artifact.output_names,
        input_shape=["batch", *shape[1:]] if artifact.dynamic_batch else shape, dynamic_batch=artifact.dynamic_batch,
        options=options.to_dict(), info=artifact.info, tools=tool_versions(),
        upstream={"artifact": upstream.path.name, "sha256": upstream.record.artifact_sha256} if upstream else None)


def check_weights_unchanged(spec: SourceSpec, recorded: str | None, artifact: Path | None = None) -> None:
    """The weights the spec reads (--weights, or an hf: directory's) are the ones the sidecar recorded.
    A reference program (a model held in memory at export) that is missing or changed is damage:
    ParityError (exit 4), never a pass."""
    from vitexport.models.sources import kind_of, weights_identity

    whose = f"{artifact.name}'s reference program" if artifact is not None else "the reference program"
    if kind_of(spec.model) == "exported" and recorded:
        where = Path(spec.model.partition(":")[2])
        if not where.is_file():
            raise ParityError(f"{whose} {where.name} is missing (it should lie beside the artifact)")
    found = weights_identity(spec)
    if found and recorded and found[1] != recorded:
        if kind_of(spec.model) == "exported":
            raise ParityError(f"{whose} {Path(found[0]).name} is damaged or changed since export "
                              "(its sha256 differs from the sidecar's)")
        raise WeightsError(f"{found[0]} changed since export (sha256 differs from the sidecar's)")


def result_of(record: ArtifactRecord, artifact: Path, timings: dict) -> dict[str, Any]:
    """The JSON contract's export/verify object."""
    return {
        "backend": record.backend,
        "artifact": str(Path(artifact).resolve()),
        "sidecar": str(sidecar.path_for(Path(artifact)).resolve()),
        "status": record.status,
        "provider": record.provider,
        "model": record.source.model,
        "source_notes": record.source.notes,  # what vitexport chose or changed to load and export the model
        "preprocessing": record.source.preprocessing,
        "input_shape": record.input_shape,
        "dynamic_batch": record.dynamic_batch,
        "precision": record.precision,
        "options": record.options,
        "info": record.info,
        "parity": record.parity.to_dict() if record.parity is not None else None,
        "timings": timings,
    }
