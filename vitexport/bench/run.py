"""Benchmark orchestration: checking what the user asked for, what each bench target runs (artifacts
given, or exported now), the rows to measure, and the report that puts them side by side.

The measuring itself: vitexport.bench.session (one worker per row, a target, an artifact and a batch
size; one for the reference kernel; one per GEMM library), vitexport.bench.rounds (the workers taking turns
in short rounds) and vitexport.bench.worker (the worker's protocol).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from vitexport import backends
from vitexport.backends.base import BenchTarget
from vitexport.bench.session import AUTO, Planned, Session, Settings, compare, retire_behind
from vitexport.core.errors import BackendUnavailable, ParityError, RegressionError, RuntimeFailure, UsageError
from vitexport.core.options import check_number
from vitexport.core.progress import Progress, ProgressLike, using
from vitexport.export import sidecar
from vitexport.export.sidecar import ArtifactRecord
from vitexport.models.sources import SourceSpec, display_name


def bench(spec: SourceSpec | None, targets: list[str], batches: list[int] | str, *, artifacts: list[str | Path] = (),
          threads: int | None = None, warmup_iters: int = 5, warmup_s: float = 1.0, iters: int | None = None,
          budget_s: float | None = 5.0, seed: int = 0, out_dir: str | Path = "vitexport-out",
          roofline: bool = True, label: str | None = None, allow_fallback: bool = False, trust_code: bool = False,
          baseline: str | Path | list | None = None, max_slowdown: float | None = None, rounds: int | None = None,
          progress: ProgressLike = None, latency_budget_ms: float | None = None,
          recheck_s: float | None = None, retire_slower: float | None = None, retire_screen: float | None = None,
          start_together: bool = False,
          profile: bool = False, write_files: Callable[[dict, Path, list[Path]], dict] | None = None) -> dict[str, Any]:
    """Measure each target at each batch size on identical feeds, each row in its own worker process,
    the rows taking turns in short rounds (`rounds`: how many; default: enough bursts of about
    0.25 s to fill `budget_s`, at least 8).

    `batches` may be "auto": double the batch until throughput stops improving, `latency_budget_ms`
    is exceeded or memory runs short, and report the knee.

    `baseline`: a stored bench report of this machine, or artifacts (one or more) measured in the
    same rounds as the candidates and matched to them like report rows. Rows slower beyond the margin
    raise RegressionError carrying the report, after its files are written (by `write_files(report, stem, inputs)`,
    which the API passes: vitexport.report.files.write_all; this room makes the report, showing it is
    the report room's); rows that cannot be told
    apart from noise are measured again for up to `recheck_s` (default `budget_s`), then called
    inconclusive in `report["warnings"]`.

    `retire_slower` (a ratio, e.g. 1.1): a row that the A/B gate's paired statistics find slower than
    its batch's fastest row beyond it stops taking turns (its row says so in `retired`, with the numbers
    of the rounds it ran): how optimize stops timing candidates that cannot win. `retire_screen` (a
    ratio well beyond the machine's noise, e.g. 2.0): with `retire_slower`, a row slower than the
    fastest beyond it in each of the first SCREEN_ROUNDS rounds, paired by round, stops at once, before
    the gate has its rounds (the fp32 rows beside int8 ones). `start_together`: the
    workers load at once rather than in turn, and their load time and first inference,
    not measured alone, are left out of the rows.

    `profile`: after the timing, each row's worker runs the row's feed under its runtime's own profiler
    (vitexport.bench.profile): the row's time per operator class, its top operators, and the share of
    its p50 the profiler accounts for, in `row["profile"]`. A row whose runtime has no profiler here
    says why there; when no row could be profiled, BackendUnavailable is raised carrying the report,
    after its files are written.

    Artifacts (and baseline artifacts) whose files differ from their sidecar raise ParityError before
    anything is timed. When no row the user asked for could run, the error of the rows (BackendUnavailable
    or RuntimeFailure) is raised carrying the report."""
    from vitexport.bench import fingerprint, regression
    from vitexport.export.staging import prepare_out_dir

    known = backends.bench_targets()
    targets = [backends.bench_target_name(t) for t in targets]  # `onnx` as exported: `onnxruntime`
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise UsageError(f"unknown bench backend(s) {', '.join(unknown)} (known: {', '.join(known)})")
    auto = is_auto(batches)
    check_settings([1] if auto else batches, threads, warmup_iters, warmup_s, iters, budget_s)
    if rounds is not None:
        check_number(rounds, "--rounds", minimum=1, maximum=1000)
    if retire_slower is not None:
        check_number(retire_slower, "retire_slower", minimum=1.0, maximum=1000.0)
    if retire_screen is not None:
        check_number(retire_screen, "retire_screen", minimum=1.0, maximum=1000.0)
    for flag, value in (("--latency-budget-ms", latency_budget_ms), ("--recheck-s", recheck_s)):
        if value is not None:
            check_number(value, flag, minimum=0, maximum=1e7)
    if profile and auto:
        raise UsageError("--profile breaks down the batch sizes given; give --batch N rather than --batch auto")
    if latency_budget_ms is not None and not auto:
        raise UsageError("--latency-budget-ms bounds the --batch auto sweep; give --batch auto")
    regression.check_slowdown(max_slowdown)
    if auto and baseline:
        raise UsageError("--batch auto looks for a knee and compares nothing; give the batch sizes to compare "
                         "with --baseline")
    old, old_path, base_artifacts = parse_baseline(baseline)
    for path in [*artifacts, *base_artifacts]:
        check_intact(Path(path))
    threads = threads or fingerprint.usable_cores() or 1
    out = prepare_out_dir(out_dir)
    settings = Settings(threads=threads, warmup_iters=warmup_iters, warmup_s=warmup_s, iters=iters,
                        budget_s=budget_s, seed=seed, allow_fallback=allow_fallback, auto=auto,
                        batches=[1] if auto else list(batches), rounds=rounds, latency_budget_ms=latency_budget_ms,
                        recheck_s=budget_s if recheck_s is None else recheck_s, max_slowdown=max_slowdown,
                        roofline=roofline, retire_slower=retire_slower,
                        retire_screen=retire_screen if retire_slower is not None else None, start_together=start_together,
                        profile=profile)
    with using(progress) as reporter:
        report = measure_all(spec, targets, settings, artifacts=[Path(a) for a in artifacts], out=out, label=label,
                             trust_code=trust_code, old=old, old_path=old_path, base_artifacts=base_artifacts,
                             progress=reporter)
    if report.get("baseline"):  # the model's memory and load time too, beside its latency
        from vitexport.bench import holding

        before = report["baseline"].get("rows") or (old or {}).get("results", [])
        holding.judge(report["baseline"], {regression.name(regression.key(r)): r for r in report["results"]},
                      {regression.name(regression.key(r)): r for r in before})
    strict(report)  # a run that timed nothing replaces no earlier report: it raises before writing
    if write_files is not None:
        report["files"] = write_files(report, out / f"bench-{safe_name(report['model'])}",
                                      run_inputs(artifacts, old_path, base_artifacts))
    comparison = report.get("baseline")
    if comparison and (comparison["regressions"] or comparison.get("costlier")):
        raise RegressionError(regression.bench_message(comparison), report)
    if profile:
        nothing_profiled(report)
    return report


def nothing_profiled(report: dict) -> None:
    """--profile where no timed row's runtime could be profiled: raise BackendUnavailable (exit 3)
    carrying the report, whose rows say why each could not."""
    profiles = [r["profile"] for r in report["results"] if r.get("profile")]
    if profiles and not any(p.get("available") for p in profiles):
        error = BackendUnavailable(f"--profile: no row could be profiled here: {profiles[0].get('reason')}")
        error.result = report
        raise error


def run_inputs(artifacts, old_path: Path | None, base_artifacts: list[Path]) -> list[Path]:
    """The files this run reads, which its reports must never replace."""
    return [Path(p) for p in [*artifacts, *([old_path] if old_path else []), *base_artifacts]]


def is_auto(batches) -> bool:
    return batches == AUTO or (isinstance(batches, (list, tuple)) and list(batches) == [AUTO])


def parse_baseline(baseline) -> tuple[dict | None, Path | None, list[Path]]:
    """(stored report, its path, []) or (None, None, baseline artifacts)."""
    if baseline is None:
        return None, None, []
    paths = [Path(p) for p in (baseline if isinstance(baseline, (list, tuple)) else [baseline])]
    if not paths:
        return None, None, []
    artifacts = [p for p in paths if sidecar.path_for(p).is_file()]
    if len(artifacts) == len(paths):
        return None, None, artifacts
    if len(paths) > 1:
        raise UsageError("--baseline takes one bench report, or artifacts (each with its sidecar beside it), "
                         "not both and not several reports")
    path = paths[0]
    if path.suffix != ".json" and path.exists():
        raise UsageError(f"--baseline {path}: no sidecar {sidecar.path_for(path).name} beside it (an artifact "
                         "baseline needs the sidecar vitexport wrote)")
    return load_bench_baseline(path), path, []


def load_bench_baseline(path: Path) -> dict:
    """A single machine's bench report (a merged `compare` report mixes machines)."""
    from vitexport.bench.stored import is_merged, load

    try:
        report = load(Path(path))  # every row is checked as data there
    except UsageError as e:
        raise UsageError(f"--baseline {e}") from None
    if is_merged(report) or report.get("merged_from"):
        raise UsageError(f"--baseline {path} merges several machines; give one machine's bench report")
    return report


def check_intact(path: Path) -> None:
    """The artifact's files are the ones its sidecar describes, as `verify` checks them (exit 4)."""
    from vitexport.export.integrity import damaged, integrity_problem

    record = sidecar.read(path)
    problem = integrity_problem(backends.get(record.backend), path, record)
    if problem:
        raise ParityError(damaged(path, problem))


def measure_all(spec: SourceSpec | None, targets: list[str], settings: Settings, *, artifacts: list[Path], out: Path,
                label: str | None, trust_code: bool, old: dict | None, old_path: Path | None,
                base_artifacts: list[Path], progress: Progress) -> dict[str, Any]:
    """The report's measurements: sources, workers, rounds, the baseline's verdict, the roofline."""
    from vitexport.bench import conditions, fingerprint, regression
    from vitexport.bench import stored as reports

    known = backends.bench_targets()
    sources, model_name, gflops = sources_for(spec, [known[t] for t in targets], settings.batches, artifacts, out,
                                              settings.seed, trust_code, progress)
    model_name = display_name(model_name)
    # Before any timing: a user's file, or one of this run's inputs, stays.
    reports.check_writable(out / f"bench-{safe_name(model_name)}", run_inputs(artifacts, old_path, base_artifacts))
    plan = planned_rows("candidate", sources, targets, settings, model_name)
    base_plan: list[Planned] = []
    if base_artifacts:
        base_sources, base_model, _ = sources_for(None, [known[t] for t in targets], settings.batches, base_artifacts,
                                                  out, settings.seed, trust_code, progress)
        base_plan = planned_rows("baseline", base_sources, targets, settings, base_model)
    pairs, unmatched = regression.pair_rows([p.row for p in plan], [p.row for p in base_plan])
    count = settings.round_count(paired=bool(base_plan))
    shape = sources["torch"][0]["record"].source.input_shape if "torch" in sources else None
    report: dict[str, Any] = {"schema": reports.SCHEMA, "model": model_name, "label": label,
                              "input_shape": ["batch", *shape[1:]] if shape else None,
                              "fingerprint": fingerprint.fingerprint(settings.threads),
                              "settings": settings.to_dict(count), "results": [], "roofline": None}
    everything = plan + base_plan
    with Session(settings, progress) as session:
        session.start(everything)
        by_row = {id(p.row): p for p in everything}
        for i, (cand, base) in enumerate(pairs):  # the two sides of a pair run back to back
            for row in (cand, base):
                if by_row[id(row)].cell is not None:
                    by_row[id(row)].cell.pair = i
        if settings.roofline:
            session.start_gemms(plan)
        rounds = session.rounds(settings.burst(count))
        if settings.auto:
            report["sweeps"] = session.sweeps(plan, rounds)
        else:
            progress.step("timing", total=count)
            limit = settings.retire_slower
            rounds.run(session.cells(everything), count,
                       retire=None if limit is None else
                       lambda cells: retire_behind(cells, limit, screen=settings.retire_screen))
        rounds.top_up()
        session.fill(everything)
        report["results"] = [r for p in plan for r in (p.sweep_rows or [p.row])]
        if old is not None or base_plan:
            session.recheck(report, plan, base_plan, pairs, unmatched, old, old_path, rounds, count)
        report["conditions"] = conditions.summary(rounds.states, settings.threads, session.reference_info)
        if settings.roofline:
            session.roofline(report, gflops, rounds)
        if settings.profile:
            session.profile(plan)
        session.finish(everything)
    if old is not None or base_plan:
        comparison = compare(report, base_plan, pairs, unmatched, old, old_path, settings, final=True)
        report["baseline"] = comparison
        if comparison["inconclusive"]:
            report.setdefault("warnings", []).append(regression.inconclusive_message(comparison))
    return report


def strict(report: dict) -> None:
    """When nothing the user asked for could run, raise the rows' error carrying the report. Asked
    for: the rows of the artifacts named (else every row), and those of the baseline's artifacts."""
    sides = [report["results"], (report.get("baseline") or {}).get("rows") or []]
    for rows in sides:
        asked = [r for r in rows if r.get("named")] or rows
        if asked and not any(r.get("available") for r in asked):
            failed = [r for r in asked if r.get("failed")]
            first = (failed or asked)[0]
            text = (f"nothing could be timed: {first['backend']} ({first.get('artifact') or first['precision']}): "
                    f"{first.get('reason') or 'unknown'}")
            error = RuntimeFailure(text) if failed else BackendUnavailable(text)
            error.result = report
            raise error


def planned_rows(side: str, sources: dict, targets: list[str], settings: Settings, model_name: str) -> list[Planned]:
    """One row per target x artifact of its backend x batch; those that cannot run here say why."""
    known = backends.bench_targets()
    plan = []
    for name in targets:
        target = known[name]
        if settings.allow_fallback:
            target = replace(target, run=replace(target.run, allow_fallback=True))
        be = backends.get(target.backend)
        # Every artifact of the target's backend is timed (an fp32 and an int8 ONNX side by side).
        for source, batch in [(s, b) for s in sources.get(target.backend if target.needs_artifact else "torch")
                              or [None] for b in settings.batches]:
            row = {"backend": name, "batch_size": batch, "model": model_name,
                   "precision": source["record"].precision if source else "fp32",
                   "artifact": Path(source["artifact"]).name if source and source["artifact"] else None}
            if source and source.get("named"):
                row["named"] = True
            row["verification"] = verification_brief(source["record"] if source else None, target.needs_artifact)
            reason = (be.bench_unavailable_for(target, source["record"]) if source
                      else be.bench_unavailable(target) or f"no {target.backend} artifact to run")
            if reason is None and settings.auto and source and not source["record"].dynamic_batch:
                reason = f"the artifact has a fixed batch of {source['record'].input_shape[0]}; --batch auto needs " \
                         "a dynamic batch"
            if reason:
                row.update(available=False, reason=reason)
                plan.append(Planned(row, None, be, source, side))
                continue
            job = {"kind": "model", "backend": target.backend, "module": backends.REGISTRY[target.backend],
                   "artifact": source["artifact"], "record": source["record"].to_dict(), "threads": settings.threads,
                   "seed": settings.seed, "run": vars(target.run)}
            plan.append(Planned(row, job, be, source, side))
    return plan


def check_settings(batches, threads, warmup_iters, warmup_s, iters, budget_s) -> None:
    """Every number a user can type, before anything is exported or timed."""
    if not batches:
        raise UsageError("give at least one --batch")
    for b in batches:
        check_number(b, "--batch", minimum=1, maximum=4096)
    for flag, value, low in (("--threads", threads, 1), ("--warmup-iters", warmup_iters, 0),
                             ("--warmup-s", warmup_s, 0), ("--iters", iters, 1), ("--budget-s", budget_s, 0)):
        if value is not None:
            check_number(value, flag, minimum=low, maximum=10_000_000)
    if iters is None and (budget_s is None or budget_s <= 0):
        raise UsageError("--budget-s must be positive when --iters is not given")


def safe_name(name: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "").strip("_.") or "model"


def sources_for(spec, targets: list[BenchTarget], batches: list[int], artifacts, out: Path, seed: int,
                trust_code: bool, progress: Progress):
    """What each target runs: artifacts given by the user, or exports made (and verified) now.
    Returns ({backend: [{"artifact", "record", "bytes", "named"}, ...]}, model name, GFLOP per image)."""
    from vitexport.export.pipeline import export, trusted_spec
    from vitexport.models.sources import load

    records: dict[str, list] = {}
    for path in artifacts:
        record = sidecar.read(Path(path))
        # The torch rows rebuild the recorded model: only with code the user trusts, never unpickling.
        record.source.spec = trusted_spec(record, trust_code, allow_pickle=False, beside=Path(path)).to_dict()
        records.setdefault(record.backend, []).append(
            {"artifact": str(path), "record": record, "bytes": size_of(Path(path), record), "named": True})
        records.setdefault("torch", [{"artifact": None, "record": replace(record, backend="torch", precision="fp32"),
                                      "bytes": None}])
    if spec is not None:
        progress.step(f"loading {spec.model}")
        loaded = load(spec)
        model_name = spec.model
        gflops = loaded.config.gflops() if loaded.config else None
        records["torch"] = [{"artifact": None, "bytes": None, "record": ArtifactRecord(
            backend="torch", artifact="", source=loaded.describe(), seed=seed, precision="fp32",
            input_names=["pixel_values"], output_names=loaded.output_names or [loaded.lone_output_name],
            input_shape=list(loaded.input_shape), dynamic_batch=True, options={}, info={})}]
        needed = sorted({t.backend for t in targets if t.needs_artifact} - set(records))
        for name in needed:
            be = backends.get(name)
            if not be.availability().ok or be.bench_unavailable(next(t for t in targets if t.backend == name)):
                continue
            progress.step(f"exporting {name} (verified) for the benchmark")
            result = export(name, spec, be.bench_options(batches), out / "artifacts", seed=seed, progress=progress)
            path = Path(result["artifact"])
            record = sidecar.read(path)
            records[name] = [{"artifact": str(path), "record": record, "bytes": size_of(path, record)}]
        return records, model_name, gflops
    if not records:
        raise UsageError("give --config/--model or artifact paths to benchmark")
    any_record = next(iter(records.values()))[0]["record"]
    cfg = any_record.source.config
    if cfg:
        from vitexport.models.presets import ViTConfig

        return records, any_record.source.model, ViTConfig.from_dict(cfg).gflops()
    return records, any_record.source.model, None


def verification_brief(record: ArtifactRecord | None, is_artifact: bool) -> dict[str, Any]:
    """How the row's artifact was checked against PyTorch, from its sidecar: what the HTML report
    charts against latency. A PyTorch row is the reference itself."""
    from vitexport.verify.tasks import task_brief

    if not is_artifact:
        return {"status": "reference"}
    parity = record.parity if record is not None else None
    summary = parity.summary if parity is not None else {}
    images = parity.images if parity is not None else None
    accuracy = (images.accuracy or {}).get("candidate") if images is not None else None
    return {"status": record.status if record is not None else "unverified",
            "cosine_similarity": summary.get("cosine_similarity"), "max_abs_error": summary.get("max_abs_error"),
            "accuracy": accuracy, **task_brief(parity.to_dict() if parity is not None else None)}


def size_of(path: Path, record: ArtifactRecord) -> int:
    """Bytes on disk: the file or package folder, plus the other files the artifact consists of."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    files += [path.with_name(name) for name in record.files]
    return sum(p.stat().st_size for p in files if p.exists())
