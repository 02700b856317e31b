"""The workers of one bench run, from the first load to the last verdict: which rows get a worker, the
reference kernel and the GEMM libraries, the rounds, the batch sweep, the baseline's comparison and
its re-measurement, the roofline, and each row's numbers from what its worker measured.

Every worker stays alive until the verdicts are in, so a comparison that cannot tell yet is measured
again in the same rounds; `Session` kills whatever is left when it ends, however it ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vitexport.bench.rounds import REFERENCE_MS, Cell, Probe, Rounds, WorkerProcess
from vitexport.core.progress import Progress
# Bursts of BURST_S: short enough that two sides of a pair see the same phase of a noisy machine. The
# numbers are the ones a package's check on the device uses too.
from vitexport.core.roundstats import BURST_S, MAX_ROUNDS, MIN_ROUNDS, round_count  # noqa: F401

AUTO = "auto"
# Paired rounds before a row may be retired: the fewest whose 95 % signed-rank interval is bounded. Its
# low end is then the smallest round's ratio, so a row is retired only when every round put it beyond
# the limit. (The gate waits for MIN_PAIRS: it must also be able to clear a row, which needs a narrower
# interval; retiring only ever says "slower".)
RETIRE_PAIRS = 6
# What a worker's open measures of a model's load (vitexport.bench.loadcost), copied into its rows.
LOAD_COSTS = ("load_cold_s", "load_warm_s", "cold_dropped", "compile_s", "model_anon_mb", "model_file_mb")
# Rounds of the screening (`retire_screen`): a row beyond the screen's ratio in each of them, paired by
# round, cannot win; two, so one round that caught the fastest row in a fast phase decides nothing.
SCREEN_ROUNDS = 2


@dataclass
class Settings:
    """How one bench run measures: the user's settings, checked, and what follows from them."""

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
    # A row slower than its batch's fastest beyond this ratio, by the A/B gate's paired verdict, stops
    # taking turns (optimize: a candidate that cannot win costs no more time); None: every row runs on.
    retire_slower: float | None = None
    # With retire_slower: a row beyond this ratio of the fastest in each of the first SCREEN_ROUNDS
    # rounds stops at once (a ratio far beyond the machine's noise: such a row cannot win).
    retire_screen: float | None = None
    # Workers load all at once (optimize: ranks on the rounds alone, and its eight loads take seconds
    # each one at a time); load time and first inference are then not reported.
    start_together: bool = False
    # After the timing, each row's operators from its runtime's own profiler (bench --profile).
    profile: bool = False

    def round_count(self, paired: bool) -> int:
        """Rounds asked for, else: with --iters, up to MIN_ROUNDS bursts of them; with a time budget,
        bursts of about BURST_S that fill it (at least MIN_ROUNDS, at most MAX_ROUNDS). A/B pairs need
        MIN_ROUNDS for an interval."""
        if self.rounds:
            return self.rounds
        if self.iters:
            count = min(self.iters, MIN_ROUNDS)
            return max(count, MIN_ROUNDS) if paired else count
        return round_count(self.budget_s)

    def burst(self, count: int) -> dict:
        if self.iters:
            return {"runs": -(-self.iters // count)}
        return {"ms": self.budget_s * 1000.0 / count}

    def to_dict(self, count: int) -> dict:
        return {"threads": self.threads, "warmup_iters": self.warmup_iters, "warmup_s": self.warmup_s,
                "iters": self.iters, "budget_s": self.budget_s, "seed": self.seed, "rounds": count,
                "burst": self.burst(count), "allow_fallback": self.allow_fallback,
                "batch": AUTO if self.auto else self.batches, "latency_budget_ms": self.latency_budget_ms,
                "workers_started": "together" if self.start_together else "one at a time",
                "profile": self.profile,
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


def compare(report: dict, base_plan: list[Planned], pairs, unmatched, old, old_path, settings: Settings,
            final: bool) -> dict:
    """The baseline's comparison: A/B over paired rounds, or against the stored report."""
    from vitexport.bench import regression

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
        """Open every row's worker and prepare its batch (first inference, warm-up), one at a time, so
        load time and the first inference are timed alone; with `start_together` (optimize, which ranks
        on the rounds alone) they load all at once, and those two are not reported. Then the reference
        kernel's."""
        from vitexport.bench.fingerprint import cpu_features
        from vitexport.bench.roofline import basis_for

        features = cpu_features()
        todo = [p for p in plan if p.job is not None]
        together = self.settings.start_together
        self.progress.step("starting workers" + (" together" if together else ""), total=len(todo) + 1)
        for p in todo:
            p.cell = Cell(f"{p.row['backend']} batch {p.row['batch_size']}", self._worker(), p.row["batch_size"])
        opened = self._ask_each(todo, "open", lambda p: p.job, together)
        # Warm-ups in turn either way: eight runtimes' thread pools spinning at once only slow each other.
        prepare = {"warmup_iters": self.settings.warmup_iters, "warmup_s": self.settings.warmup_s}
        prepared = self._ask_each([p for p in todo if opened[id(p)].get("ok")], "prepare",
                                  lambda p: {"batch": p.row["batch_size"], **prepare}, together=False)
        for p in todo:
            reply = prepared.get(id(p)) or opened[id(p)]
            if reply.get("ok"):
                p.opened = {**opened[id(p)], **({"load_s": None} if together else {})}
                p.cell.first_inference_ms = None if together else reply.get("first_inference_ms")
                # Which measured GEMM rate the row compares with: its processor's, at its precision.
                p.row["roofline_basis"] = basis_for(p.be.roofline_basis(p.opened.get("provider")),
                                                    p.row["precision"], features)
            else:
                p.cell.failure = {"reason": reply.get("reason") or "unknown", "kind": reply.get("kind", "failed")}
                p.cell.worker.kill()
            self.progress.advance()
        worker = self._worker()
        reply = worker.ask("open", kind="reference", threads=self.settings.threads)
        if reply.get("ok") and worker.ask("prepare", warmup_iters=3, warmup_s=0.2).get("ok"):
            self.reference = Probe("reference", worker, {"ms": REFERENCE_MS, "warmup_runs": 1, "warmup_s": 0})
            self.reference_info = {"what": reply.get("what"), "flop": reply.get("flop")}
        self.progress.advance()

    def _ask_each(self, plan: list[Planned], op: str, fields, together: bool) -> dict[int, dict]:
        """Each row's worker's reply to `op` (with `fields(p)`), by id(p): in turn, or all asked first."""
        replies = {}
        for p in plan:
            self.progress.note(f"{op}: {p.row['backend']} ({p.row['precision']}) at batch {p.row['batch_size']}"
                               + (" [baseline]" if p.side == "baseline" else ""))
            p.cell.worker.send(op, **fields(p))
            if not together:
                replies[id(p)] = p.cell.worker.receive()
        return {id(p): p.cell.worker.receive() for p in plan} if together else replies

    def start_gemms(self, plan: list[Planned]) -> None:
        """A worker per GEMM library for every basis a row that started needs."""
        from vitexport.bench.roofline import BASES, CUDA_N, GEMM_N, installed

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
        from vitexport.bench.roofline import GEMM_BURSTS

        probes = [p for entries in self.gemms.values() for _, p in entries if isinstance(p, Probe)]
        return Rounds(burst, reference=self.reference, gemms=probes, seed=self.settings.seed,
                      progress=self.progress, gemm_bursts=GEMM_BURSTS)

    def sweeps(self, plan: list[Planned], rounds: Rounds) -> list[dict]:
        """`--batch auto` for each row that started: its sweep, one row per batch, and the knee."""
        from vitexport.bench import sweep

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
            for step in found.steps:  # each batch's numbers from all its rounds, as its row shows them
                if not cells[step.batch].failure:
                    step.throughput_ips, step.p50_ms = throughput(cells[step.batch])
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
        from vitexport.bench import regression

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
        from vitexport.bench.roofline import CUDA_N, GEMM_BURSTS, GEMM_N, REPORT_KEYS, cap, fractions, summarise

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

    def profile(self, plan: list[Planned]) -> None:
        """`--profile`: each timed row's worker runs its runtime's profiler on the row's feed, after every
        timed run of every row (a profiler costs time; no timed run has one). A row whose runtime has no
        profiler here, or whose profiler fails, says why in its profile."""
        from vitexport.bench import profile
        rows = [p for p in plan if p.cell is not None and not p.cell.failure and p.row.get("available")]
        self.progress.step("profiling each row's operators", total=len(rows))
        for p in rows:
            p50 = p.row["latency_ms"]["p50"]
            self.progress.note(f"profile: {p.row['backend']} ({p.row['precision']}) at batch {p.row['batch_size']}")
            reply = p.cell.worker.ask("profile", batch=p.row["batch_size"], runs=profile.profile_runs(p50),
                                      warmup_runs=profile.WARMUP_RUNS)
            if reply.get("ok"):
                run_ms = reply.get("run_ms") or []
                p.row["profile"] = profile.summarise(reply["runtime"], reply["ops"], reply["runs"], p50,
                                                     sum(run_ms) / len(run_ms) if run_ms else None)
            else:
                p.row["profile"] = profile.unavailable(reply.get("reason") or "unknown")
            self.progress.advance()

    def fill(self, plan: list[Planned], closed: dict[int, dict] | None = None) -> None:
        for p in plan:
            if p.cell is not None and p.sweep_rows is None:
                self._fill_row(p.row, p.cell, p, (closed or {}).get(id(p)))

    @staticmethod
    def _fill_row(row: dict, cell: Cell, p: Planned, close: dict | None = None) -> None:
        """The row's numbers from its cell (again after more rounds; with `close`, its peak memory)."""
        from vitexport.bench.stats import relative_spread
        from vitexport.core.timing import LatencyStats

        if cell.failure or not cell.samples:
            failure = cell.failure or {"reason": "no timed runs", "kind": "failed"}
            keep = {k: row[k] for k in ("backend", "batch_size", "model", "precision", "artifact", "named", "sweep",
                                        "knee") if k in row}
            row.clear()
            row.update(keep, available=False, reason=failure["reason"], failed=failure["kind"] != "unavailable")
            return
        stats = LatencyStats(cell.samples, cell.batch).to_dict()
        if cell.retired:
            row["retired"] = cell.retired
        row.update(available=True, reason=None, **stats, rounds=len(cell.medians),
                   per_round={"median_ms": list(cell.medians), "reference_ms": list(cell.references)},
                   round_spread=relative_spread(cell.medians), provider=p.opened.get("provider"),
                   load_s=p.opened.get("load_s"), first_inference_ms=cell.first_inference_ms,
                   **{k: p.opened.get(k) for k in LOAD_COSTS if p.opened.get(k) is not None},
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


def retire_behind(cells: list[Cell], limit: float, screen: float | None = None) -> None:
    """Retire the cells clearly slower than the fastest cell of their batch size: the A/B gate's verdict
    on their per-round medians, paired by round ("slower": the whole interval of the ratio beyond
    `limit`), over the rounds every such cell ran in. Until there are RETIRE_PAIRS rounds, nothing is
    retired that way; with `screen`, a cell beyond `screen` times the fastest's median in each of the
    last SCREEN_ROUNDS rounds (or more) is retired as soon as there are that many."""
    from vitexport.bench.regression import ab_verdict
    from vitexport.bench.stats import median

    groups: dict[int, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.batch, []).append(cell)
    for group in groups.values():
        n = min(len(c.medians) for c in group)
        if len(group) < 2 or n < min(RETIRE_PAIRS, SCREEN_ROUNDS if screen else RETIRE_PAIRS):
            continue
        leader = min(group, key=lambda c: median(c.medians[-n:]))
        for cell in group:
            if cell is leader:
                continue
            ratios = [a / b for a, b in zip(cell.medians[-n:], leader.medians[-n:])]
            if screen and min(ratios) > screen:
                cell.retired = (f"stopped after {n} rounds: {median(ratios):.2f}x the fastest row's p50 "
                                f"(at least {min(ratios):.2f}x in every round), beyond the screen's {screen:.2f}x")
                continue
            if n < RETIRE_PAIRS:
                continue
            verdict = ab_verdict(cell.medians[-n:], leader.medians[-n:], limit, min_pairs=RETIRE_PAIRS)
            if verdict["verdict"] == "slower":
                cell.retired = (f"stopped after {n} rounds: {verdict['ratio']:.2f}x the fastest row's p50 "
                                f"({verdict['low']:.2f}x-{verdict['high']:.2f}x), beyond {limit:.2f}x")


def throughput(cell: Cell) -> tuple[float, float]:
    """(images/s, p50 ms) from everything a cell measured."""
    from vitexport.core.timing import LatencyStats

    stats = LatencyStats(cell.samples, cell.batch)
    return stats.throughput_ips, stats.p50


def recheck_rounds(settings: Settings, count: int) -> int:
    """Rounds a re-measurement may add: the recheck budget at the main rounds' pace."""
    if not settings.recheck_s:
        return 0
    share = settings.recheck_s / settings.budget_s if settings.budget_s else 1.0
    return max(MIN_ROUNDS // 2, min(MAX_ROUNDS, math.ceil(count * share)))


