"""Benchmark orchestration: what each bench target runs, persistent workers taking turns in short
rounds (vitexport.rounds), the baseline (a stored report, or artifacts measured in the same rounds),
the throughput sweep, the roofline, and the report that puts them side by side.

Worker protocol: vitexport.bench_worker. One worker per row (a target, an artifact and a batch size),
one for the reference kernel, one per GEMM library; all stay alive until the verdicts are in, so a
comparison that cannot tell yet is measured again in the same rounds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import backends, sidecar
from .backends.base import BenchTarget
from .errors import BackendUnavailable, ParityError, RegressionError, RuntimeFailure, UsageError
from .options import check_number
from .progress import Progress, ProgressLike, using
from .rounds import REFERENCE_MS, Cell, Probe, Rounds, WorkerProcess
from .sidecar import ArtifactRecord
from .sources import SourceSpec

AUTO = "auto"
BURST_S = 0.25  # one burst: short enough that two sides of a pair see the same phase of a noisy machine
MIN_ROUNDS = 8
MAX_ROUNDS = 200


def bench(spec: SourceSpec | None, targets: list[str], batches: list[int] | str, *, artifacts: list[str | Path] = (),
          threads: int | None = None, warmup_iters: int = 5, warmup_s: float = 1.0, iters: int | None = None,
          budget_s: float | None = 5.0, seed: int = 0, out_dir: str | Path = "vitexport-out",
          roofline: bool = True, label: str | None = None, allow_fallback: bool = False, trust_code: bool = False,
          baseline: str | Path | list | None = None, max_slowdown: float | None = None, rounds: int | None = None,
          progress: ProgressLike = None, latency_budget_ms: float | None = None,
          recheck_s: float | None = None) -> dict[str, Any]:
    """Measure each target at each batch size on identical feeds, each row in its own worker process,
    the rows taking turns in short rounds (`rounds`: how many; default: enough bursts of about
    0.25 s to fill `budget_s`, at least 8).

    `batches` may be "auto": double the batch until throughput stops improving, `latency_budget_ms`
    is exceeded or memory runs short, and report the knee.

    `baseline`: a stored bench report of this machine, or artifacts (one or more) measured in the
    same rounds as the candidates and matched to them like report rows. Rows slower beyond the margin
    raise RegressionError carrying the report, after its files are written; rows that cannot be told
    apart from noise are measured again for up to `recheck_s` (default `budget_s`), then called
    inconclusive in `report["warnings"]`.

    Artifacts (and baseline artifacts) whose files differ from their sidecar raise ParityError before
    anything is timed. When no row the user asked for could run, the error of the rows (BackendUnavailable
    or RuntimeFailure) is raised carrying the report."""
    from . import fingerprint, regression, report as reports
    from .staging import prepare_out_dir

    known = backends.bench_targets()
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise UsageError(f"unknown bench backend(s) {', '.join(unknown)} (known: {', '.join(known)})")
    auto = is_auto(batches)
    check_settings([1] if auto else batches, threads, warmup_iters, warmup_s, iters, budget_s)
    if rounds is not None:
        check_number(rounds, "--rounds", minimum=1, maximum=1000)
    for flag, value in (("--latency-budget-ms", latency_budget_ms), ("--recheck-s", recheck_s)):
        if value is not None:
            check_number(value, flag, minimum=0, maximum=1e7)
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
                        roofline=roofline)
    with using(progress) as reporter:
        report = measure_all(spec, targets, settings, artifacts=[Path(a) for a in artifacts], out=out, label=label,
                             trust_code=trust_code, old=old, old_path=old_path, base_artifacts=base_artifacts,
                             progress=reporter)
    report["files"] = reports.write_all(report, out / f"bench-{safe_name(report['model'])}")
    comparison = report.get("baseline")
    if comparison and comparison["regressions"]:
        raise RegressionError(regression.bench_message(comparison), report)
    strict(report)
    return report


@dataclass
class Settings:
    threads: int
    warmup_iters: int
    warmup_s: float
    iters: int | None
    budget_s: float | None
    seed: int
    allow_fallback: bool
    auto: bool
    batches: list[int]
    rounds: int | None
    latency_budget_ms: float | None
    recheck_s: float
    max_slowdown: float | None
    roofline: bool

    def round_count(self, paired: bool) -> int:
        """Rounds asked for, else: with --iters, up to MIN_ROUNDS bursts of them; with a time budget,
        bursts of about BURST_S that fill it (at least MIN_ROUNDS, at most MAX_ROUNDS). A/B pairs need
        MIN_ROUNDS for an interval."""
        if self.rounds:
            return self.rounds
        if self.iters:
            count = min(self.iters, MIN_ROUNDS)
            return max(count, MIN_ROUNDS) if paired else count
        return max(MIN_ROUNDS, min(MAX_ROUNDS, round(self.budget_s / BURST_S)))

    def burst(self, count: int) -> dict:
        if self.iters:
            return {"runs": -(-self.iters // count)}
        return {"ms": self.budget_s * 1000.0 / count}

    def to_dict(self, count: int) -> dict:
        return {"threads": self.threads, "warmup_iters": self.warmup_iters, "warmup_s": self.warmup_s,
                "iters": self.iters, "budget_s": self.budget_s, "seed": self.seed, "rounds": count,
                "burst": self.burst(count), "allow_fallback": self.allow_fallback,
                "batch": AUTO if self.auto else self.batches, "latency_budget_ms": self.latency_budget_ms,
                "mode": "end-to-end: host arrays in, host arrays out; rows take turns in short rounds"}


@dataclass(eq=False)
class Planned:
    """A row to measure, and how: the worker job, its source, and (once started) its cell."""

    row: dict
    job: dict | None
    be: Any = None
    source: dict | None = None
    side: str = "candidate"
    cell: Cell | None = None
    opened: dict = field(default_factory=dict)  # the worker's answers: load time, provider, first inference
    sweep_rows: list[dict] | None = None  # with --batch auto: one row per batch the sweep measured


def is_auto(batches) -> bool:
    return batches == AUTO or (isinstance(batches, (list, tuple)) and list(batches) == [AUTO])


def parse_baseline(baseline) -> tuple[dict | None, Path | None, list[Path]]:
    """(stored report, its path, []) or (None, None, baseline artifacts)."""
    from .regression import load_bench_baseline

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


def check_intact(path: Path) -> None:
    """The artifact's files are the ones its sidecar describes, as `verify` checks them (exit 4)."""
    from .pipeline import damaged, integrity_problem

    record = sidecar.read(path)
    problem = integrity_problem(backends.get(record.backend), path, record)
    if problem:
        raise ParityError(damaged(path, problem))


def measure_all(spec: SourceSpec | None, targets: list[str], settings: Settings, *, artifacts: list[Path], out: Path,
                label: str | None, trust_code: bool, old: dict | None, old_path: Path | None,
                base_artifacts: list[Path], progress: Progress) -> dict[str, Any]:
    """The report's measurements: sources, workers, rounds, the baseline's verdict, the roofline."""
    from . import conditions, fingerprint, regression, report as reports

    known = backends.bench_targets()
    sources, model_name, gflops = sources_for(spec, [known[t] for t in targets], settings.batches, artifacts, out,
                                              settings.seed, trust_code, progress)
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
            rounds.run(session.cells(everything), count)
        rounds.top_up()
        session.fill(everything)
        report["results"] = [r for p in plan for r in (p.sweep_rows or [p.row])]
        if old is not None or base_plan:
            session.recheck(report, plan, base_plan, pairs, unmatched, old, old_path, rounds, count)
        report["conditions"] = conditions.summary(rounds.states, settings.threads, session.reference_info)
        if settings.roofline:
            session.roofline(report, gflops, rounds)
        session.finish(everything)
    if old is not None or base_plan:
        comparison = compare(report, base_plan, pairs, unmatched, old, old_path, settings, final=True)
        report["baseline"] = comparison
        if comparison["inconclusive"]:
            report.setdefault("warnings", []).append(regression.inconclusive_message(comparison))
    return report


def compare(report: dict, base_plan: list[Planned], pairs, unmatched, old, old_path, settings: Settings,
            final: bool) -> dict:
    """The baseline's comparison: A/B over paired rounds, or against the stored report."""
    from . import regression

    if base_plan:
        paths = list(dict.fromkeys(p.source["artifact"] for p in base_plan if p.source and p.source["artifact"]))
        comparison = regression.compare_ab(pairs, list(unmatched), paths, settings.max_slowdown, final=final)
        comparison["rows"] = [p.row for p in base_plan]
        return comparison
    return regression.compare_bench(report, old, old_path, settings.max_slowdown, final=final)


class Session:
    """The workers of one bench run, from start to the last verdict; kills what is left on exit."""

    def __init__(self, settings: Settings, progress: Progress):
        self.settings, self.progress = settings, progress
        self.workers: list[WorkerProcess] = []
        self.reference: Probe | None = None
        self.reference_info: dict | None = None
        self.gemms: dict[str, list[tuple[str, Probe | str]]] = {}  # basis -> (library, probe or why not)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        for w in self.workers:
            w.kill()

    def _worker(self) -> WorkerProcess:
        w = WorkerProcess(self.settings.threads)
        self.workers.append(w)
        return w

    @staticmethod
    def cells(plan: list[Planned]) -> list[Cell]:
        return [p.cell for p in plan if p.cell is not None]

    def start(self, plan: list[Planned]) -> None:
        """Open every row's worker and prepare its batch (first inference, warm-up), one at a time:
        load time and the first inference are timed alone. Then the reference kernel's."""
        from .fingerprint import cpu_features
        from .roofline import basis_for

        features = cpu_features()
        todo = [p for p in plan if p.job is not None]
        self.progress.step("starting workers", total=len(todo) + 1)
        for p in todo:
            self.progress.note(f"{p.row['backend']} ({p.row['precision']}) at batch {p.row['batch_size']}"
                               + (" [baseline]" if p.side == "baseline" else ""))
            worker = self._worker()
            p.cell = Cell(f"{p.row['backend']} batch {p.row['batch_size']}", worker, p.row["batch_size"])
            reply = worker.ask("open", **p.job)
            if reply.get("ok"):
                p.opened = reply
                reply = worker.ask("prepare", batch=p.row["batch_size"], warmup_iters=self.settings.warmup_iters,
                                   warmup_s=self.settings.warmup_s)
                p.cell.first_inference_ms = reply.get("first_inference_ms")
                # Which measured GEMM rate the row compares with: its processor's, at its precision.
                p.row["roofline_basis"] = basis_for(p.be.roofline_basis(p.opened.get("provider")),
                                                    p.row["precision"], features)
            if not reply.get("ok"):
                p.cell.failure = {"reason": reply.get("reason") or "unknown", "kind": reply.get("kind", "failed")}
                worker.kill()
            self.progress.advance()
        worker = self._worker()
        reply = worker.ask("open", kind="reference", threads=self.settings.threads)
        if reply.get("ok") and worker.ask("prepare", warmup_iters=3, warmup_s=0.2).get("ok"):
            self.reference = Probe("reference", worker, {"ms": REFERENCE_MS, "warmup_runs": 1, "warmup_s": 0})
            self.reference_info = {"what": reply.get("what"), "flop": reply.get("flop")}
        self.progress.advance()

    def start_gemms(self, plan: list[Planned]) -> None:
        """A worker per GEMM library for every basis a row that started needs."""
        from .roofline import BASES, CUDA_N, GEMM_N, installed

        bases = list(dict.fromkeys(p.row.get("roofline_basis") for p in plan
                                   if p.cell is not None and not p.cell.failure and p.row.get("roofline_basis")))
        libraries = [(b, lib, dtype) for b in bases for lib, dtype in BASES[b][1]]
        self.progress.step("starting the GEMM workers", total=len(libraries))
        for basis, library, dtype in libraries:
            entries = self.gemms.setdefault(basis, [])
            if not installed(library):
                entries.append((library, "not installed"))
                self.progress.advance()
                continue
            worker = self._worker()
            n = CUDA_N if basis.startswith("cuda") else GEMM_N
            reply = worker.ask("open", kind="gemm", library=library, dtype=dtype, n=n, threads=self.settings.threads)
            if reply.get("ok"):
                worker.ask("prepare", warmup_iters=1, warmup_s=0)
                entries.append((library, Probe(f"{library} {dtype}", worker,
                                               {"runs": 2, "warmup_runs": 0, "warmup_s": 0}, reply["flop"])))
            else:
                entries.append((library, reply.get("reason") or "failed"))
                worker.kill()
            self.progress.advance()

    def rounds(self, burst: dict) -> Rounds:
        from .roofline import GEMM_BURSTS

        probes = [p for entries in self.gemms.values() for _, p in entries if isinstance(p, Probe)]
        return Rounds(burst, reference=self.reference, gemms=probes, seed=self.settings.seed,
                      progress=self.progress, gemm_bursts=GEMM_BURSTS)

    def sweeps(self, plan: list[Planned], rounds: Rounds) -> list[dict]:
        """`--batch auto` for each row that started: its sweep, one row per batch, and the knee."""
        from . import sweep

        out = []
        for p in plan:
            if p.cell is None or p.cell.failure:
                continue
            self.progress.step(f"batch sweep: {p.row['backend']} ({p.row['precision']})")
            worker = p.cell.worker

            def new_cell(batch: int, worker=worker, p=p) -> Cell:
                cell = Cell(f"{p.row['backend']} batch {batch}", worker, batch)
                reply = worker.ask("prepare", batch=batch, warmup_iters=self.settings.warmup_iters,
                                   warmup_s=self.settings.warmup_s)
                if reply.get("ok"):
                    cell.first_inference_ms = reply.get("first_inference_ms")
                else:
                    cell.failure = {"reason": reply.get("reason") or "unknown", "kind": reply.get("kind", "failed")}
                return cell

            def pair(a: Cell, b: Cell | None, count: int) -> None:
                a.pair = 0 if b is not None else None
                if b is not None:
                    b.pair = 0
                rounds.run([a] + ([b] if b is not None else []), count, gemm_slots=1)

            found, cells = sweep.run(p.cell, new_cell, pair, throughput,
                                     step_seconds=2 * (self.settings.budget_s or 1.0),
                                     latency_budget_ms=self.settings.latency_budget_ms)
            knee = found.knee(self.settings.latency_budget_ms)
            p.sweep_rows = []
            for batch, cell in sorted(cells.items()):
                row = {**p.row, "batch_size": batch, "sweep": True, "knee": knee is not None and knee.batch == batch}
                p.sweep_rows.append(row)
                self._fill_row(row, cell, p)
            out.append({"backend": p.row["backend"], "precision": p.row["precision"], "artifact": p.row["artifact"],
                        "knee_batch": knee.batch if knee else None, "knee_ips": knee.throughput_ips if knee else None,
                        "stopped": found.stopped, "latency_budget_ms": self.settings.latency_budget_ms,
                        "steps": [s.to_dict() for s in found.steps]})
        return out

    def recheck(self, report: dict, plan, base_plan, pairs, unmatched, old, old_path, rounds: Rounds,
                count: int) -> None:
        """Rows the comparison cannot decide yet are measured again, within the recheck budget."""
        from . import regression

        comparison = compare(report, base_plan, pairs, unmatched, old, old_path, self.settings, final=False)
        undecided = {c["row"] for c in comparison["undecided"]}
        extra = recheck_rounds(self.settings, count)
        if not undecided or not extra:
            return
        partner = {id(c): b for c, b in pairs}
        cells = []
        for p in plan:
            if p.cell is not None and regression.name(regression.key(p.row)) in undecided:
                cells.append(p.cell)
                cells += [q.cell for q in base_plan if q.row is partner.get(id(p.row)) and q.cell is not None]
        self.progress.step("measuring again what the comparison could not tell apart", total=extra)
        rounds.run(cells, extra, label="recheck round")
        self.fill(plan + base_plan)

    def roofline(self, report: dict, gflops: float | None, rounds: Rounds) -> None:
        """Each basis's rate from its libraries' bursts; bases a row exceeds are measured again, then
        a share still above 1 is withheld with its reason."""
        from .roofline import CUDA_N, GEMM_BURSTS, GEMM_N, REPORT_KEYS, cap, fractions, summarise

        def summarise_all() -> None:
            for basis, entries in self.gemms.items():
                measured = {}
                for library, probe in entries:
                    if isinstance(probe, Probe) and probe.samples:
                        measured[library] = {"samples_ms": probe.samples, "flop": probe.flop, "bursts": probe.bursts}
                    else:
                        measured[library] = {"unavailable": probe.failure if isinstance(probe, Probe) else probe}
                n = CUDA_N if basis.startswith("cuda") else GEMM_N
                report[REPORT_KEYS[basis]] = {**summarise(basis, measured, self.settings.threads, n),
                                              "model_gflop_per_image": gflops}

        self.progress.step("the GEMM roofline")
        summarise_all()
        over = fractions(report, gflops)
        if over:
            probes = [p for b in over for _, p in self.gemms.get(b, []) if isinstance(p, Probe)]
            rounds.top_up(probes, bursts=GEMM_BURSTS)
            summarise_all()
            fractions(report, gflops)
        cap(report)

    def fill(self, plan: list[Planned], closed: dict[int, dict] | None = None) -> None:
        for p in plan:
            if p.cell is not None and p.sweep_rows is None:
                self._fill_row(p.row, p.cell, p, (closed or {}).get(id(p)))

    @staticmethod
    def _fill_row(row: dict, cell: Cell, p: Planned, close: dict | None = None) -> None:
        """The row's numbers from its cell (again after more rounds; with `close`, its peak memory)."""
        from .bench import LatencyStats
        from .stats import relative_spread

        if cell.failure or not cell.samples:
            failure = cell.failure or {"reason": "no timed runs", "kind": "failed"}
            keep = {k: row[k] for k in ("backend", "batch_size", "model", "precision", "artifact", "named", "sweep",
                                        "knee") if k in row}
            row.clear()
            row.update(keep, available=False, reason=failure["reason"], failed=failure["kind"] != "unavailable")
            return
        stats = LatencyStats(cell.samples, cell.batch).to_dict()
        row.update(available=True, reason=None, **stats, rounds=len(cell.medians),
                   per_round={"median_ms": list(cell.medians), "reference_ms": list(cell.references)},
                   round_spread=relative_spread(cell.medians), provider=p.opened.get("provider"),
                   load_s=p.opened.get("load_s"), first_inference_ms=cell.first_inference_ms,
                   artifact_bytes=(p.source or {}).get("bytes"), threads_applied=p.opened.get("threads_applied"),
                   dtype="float32", peak_rss_mb=row.get("peak_rss_mb"), peak_gpu_mb=row.get("peak_gpu_mb"))
        if row.get("sweep"):
            row["peak_rss_mb"] = cell.rss_mb  # the worker's memory after this batch's rounds
        if close:
            row.update(peak_rss_mb=close.get("peak_rss_mb"), peak_gpu_mb=close.get("peak_gpu_mb"))

    def finish(self, plan: list[Planned]) -> None:
        """Close every worker; each row gets its worker's peak memory."""
        closed = {}
        for p in plan:
            if p.cell is not None and not p.cell.worker.closed:
                reply = p.cell.worker.close()
                closed[id(p)] = reply if reply.get("ok") else None
                for row in p.sweep_rows or []:
                    if row.get("available"):
                        row["peak_gpu_mb"] = reply.get("peak_gpu_mb")
        self.fill(plan, closed)
        for w in self.workers:
            if not w.closed:
                w.close()


def throughput(cell: Cell) -> tuple[float, float]:
    """(images/s, p50 ms) from everything a cell measured."""
    from .bench import LatencyStats

    stats = LatencyStats(cell.samples, cell.batch)
    return stats.throughput_ips, stats.p50


def recheck_rounds(settings: Settings, count: int) -> int:
    """Rounds a re-measurement may add: the recheck budget at the main rounds' pace."""
    if not settings.recheck_s:
        return 0
    share = settings.recheck_s / settings.budget_s if settings.budget_s else 1.0
    return max(MIN_ROUNDS // 2, min(MAX_ROUNDS, math.ceil(count * share)))


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
    from .pipeline import export, trusted_spec
    from .sources import load

    records: dict[str, list] = {}
    for path in artifacts:
        record = sidecar.read(Path(path))
        # The torch rows rebuild the recorded model: only with code the user trusts, never unpickling.
        record.source.spec = trusted_spec(record, trust_code, allow_pickle=False).to_dict()
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
            input_names=["pixel_values"], output_names=loaded.output_names or ["logits"],
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
        from .configs import ViTConfig

        return records, any_record.source.model, ViTConfig.from_dict(cfg).gflops()
    return records, any_record.source.model, None


def size_of(path: Path, record: ArtifactRecord) -> int:
    """Bytes on disk: the file or package folder, plus the other files the artifact consists of."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    files += [path.with_name(name) for name in record.files]
    return sum(p.stat().st_size for p in files if p.exists())
