"""The matrix run: every model × target export (export + verify), then every timing of what passed on
each device the plan names, each taken from the cache when nothing it depends on changed, run by a
pool (local worker processes, or Ray), recorded as it finishes, and merged into one report.

A cell is one model × target × bench target × device; it has one timing per batch size. Its status:
`passed` (verified and timed), `unchecked` (built and timed, but its numbers can only be checked on
the target: `vitexport verify` there), `failed` (its check failed: parity, accuracy gate, or an
artifact damaged on the way), `error` (the export or a timing raised, or its device's node left the
cluster and none joined in time), `unavailable` (its backend, bench target or device is not reachable
from here), `cancelled` (the run ended before it: a signal, a lost cluster; the next run does it).

A run that ends early still writes its report (every cell, the unfinished ones `cancelled`, and
`matrix.stopped`: why, and the exit code), and the cache keeps every export and timing that finished.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from vitexport.core import writer
from vitexport.core.errors import ClusterLost, ExitCode
from vitexport.core.termination import signal_in
from vitexport.core.words import milliseconds
from vitexport.matrix.cache import Cache
from vitexport.matrix.keys import Digests, digest, export_inputs, timing_inputs
from vitexport.matrix.plan import Model, Plan, Target

RECORDED = ("passed", "failed", "unchecked")  # export outcomes worth keeping: the same inputs give them again
OK = ("passed", "unchecked")  # exports whose artifacts are timed


@dataclass(eq=False)
class Export:
    model: Model
    target: Target
    key: str
    record: dict | None = None  # its outcome, as the cache keeps it
    cached: bool = False
    cells: list["Cell"] = field(default_factory=list)


@dataclass(eq=False)
class Timing:
    cell: "Cell"
    batch: int
    key: str | None = None
    record: dict | None = None
    cached: bool = False


@dataclass(eq=False)
class Cell:
    export: Export
    bench_target: str
    device: str
    timings: list[Timing] = field(default_factory=list)
    status: str | None = None  # set when the cell is finished
    reason: str | None = None

    @property
    def id(self) -> str:
        return f"{self.export.model.label} · {self.export.target.label} · {self.bench_target} @ {self.device}"


class Matrix:
    def __init__(self, plan: Plan, out: Path, progress: Callable[[str], None] | None = None):
        self.plan, self.out, self.pool = plan, out, None
        self.cache = Cache(out)
        self.progress = Progress(progress)
        self.machines: dict[str, dict] = {}
        digests = Digests()
        self.exports = []
        for model in plan.models:
            for target in plan.targets:
                e = Export(model, target, digest(export_inputs(plan, model, target, digests)))
                e.cells = [Cell(e, b, d) for b in target.bench for d in target.devices]
                for c in e.cells:
                    c.timings = [Timing(c, batch) for batch in plan.bench.batches]
                self.exports.append(e)
        self.cells = [c for e in self.exports for c in e.cells]
        self.progress.total = len(self.cells)
        self.stopped: dict[str, Any] | None = None  # why the run ended early, and its exit code

    def run(self, pool) -> None:
        self.pool = pool
        self.progress.start(len(self.exports), sum(len(c.timings) for c in self.cells))
        self.machines = self.pool.devices(self.plan.devices, self.plan.bench.threads)
        for e in self.exports:
            record = self.cache.get("export", e.key)
            if record is not None:
                self.exported(e, record, cached=True)
            else:
                self.pool.submit(e, "export", self.export_job(e))
        while self.pool.busy:
            for ticket, result in self.pool.collect(timeout=1.0):
                if isinstance(ticket, Export):
                    self.exported(ticket, self.export_record(ticket, result), cached=False)
                else:
                    self.timed(ticket, result, cached=False)

    # -- exports ---------------------------------------------------------------------------------------
    def export_job(self, e: Export) -> dict:
        check = self.plan.check
        return {"backend": e.target.backend, "spec": e.model.spec.to_dict(), "options": e.target.options.to_dict(),
                "out": str(self.cache.artifacts_for(e.key)), "images": str(check.images) if check.images else None,
                "atol": check.atol, "rtol": check.rtol, "min_top1_agreement": check.min_top1_agreement,
                "max_accuracy_drop": check.max_accuracy_drop, "seed": self.plan.seed,
                "pinned": reads_local_files(self.plan, e)}

    def export_record(self, e: Export, result: dict) -> dict:
        """What the cache keeps of an export: its outcome and its artifact, relative to the matrix folder."""
        from vitexport.export import sidecar

        made = result.get("result") or {}
        record = {"status": result["status"], "reason": result.get("reason"), "node": result.get("node"),
                  "seconds": result.get("seconds"), "artifact": None, "artifact_sha256": None,
                  **{k: made.get(k) for k in ("precision", "provider", "parity", "input_shape", "options", "info")}}
        if made.get("artifact") and result["status"] in RECORDED:
            path = Path(made["artifact"])
            record["artifact"] = path.resolve().relative_to(self.out.resolve()).as_posix()
            record["artifact_sha256"] = sidecar.read(path).artifact_sha256
            self.cache.put("export", e.key, record)
        return record

    def exported(self, e: Export, record: dict, cached: bool) -> None:
        e.record, e.cached = record, cached
        self.progress.job_done("export", None if cached else record.get("seconds"))
        for cell in e.cells:
            if record["status"] not in OK:
                self.finish(cell, record["status"], record.get("reason"))
                continue
            machine = self.machines.get(cell.device) or {}
            if "fingerprint" not in machine:
                self.finish(cell, "unavailable", machine.get("reason") or f"device {cell.device!r} is not reachable")
                continue
            for t in cell.timings:
                fixed = fixed_batch(record)
                if fixed is not None and t.batch != fixed:
                    self.timed(t, {"status": "unavailable", "rows": [], "seconds": None,
                                   "reason": f"the artifact takes batch {fixed} only (export it with "
                                             "options.dynamic_batch = true to time other batches)"}, cached=True)
                    continue
                t.key = digest(timing_inputs(e.key, record["artifact_sha256"], cell.bench_target, t.batch,
                                             self.plan.bench.settings(), self.plan.seed, cell.device,
                                             machine["fingerprint"]))
                hit = self.cache.get("timing", t.key)
                if hit is not None:
                    self.timed(t, hit, cached=True)
                else:
                    self.pool.submit(t, "timing", self.timing_job(t), device=cell.device)

    # -- timings ---------------------------------------------------------------------------------------
    def timing_job(self, t: Timing) -> dict:
        e = t.cell.export
        return {"artifact": str(self.out / e.record["artifact"]), "artifact_sha256": e.record["artifact_sha256"],
                "bench_target": t.cell.bench_target, "batch": t.batch, "settings": self.plan.bench.settings(),
                "seed": self.plan.seed, "device": t.cell.device, "scratch": str(self.out)}

    def timed(self, t: Timing, result: dict, cached: bool) -> None:
        self.progress.job_done("timing", None if cached else result.get("seconds"))
        if not cached:
            if result["status"] == "timed":
                self.cache.put("timing", t.key, {k: result.get(k) for k in ("status", "reason", "rows", "machine",
                                                                             "node", "seconds")})
        t.record, t.cached = result, cached
        cell = t.cell
        if all(x.record is not None for x in cell.timings):
            records = [x.record for x in cell.timings]
            damaged = [r for r in records if r["status"] == "failed"]  # the artifact arrived damaged
            errors = [r for r in records if r["status"] == "error"]
            missing = [r for r in records if r["status"] != "timed"]
            if damaged:
                self.finish(cell, "failed", damaged[0].get("reason"))
            elif errors:
                self.finish(cell, "error", errors[0].get("reason"))
            elif len(missing) == len(records):
                self.finish(cell, "unavailable", missing[0].get("reason"))
            else:
                self.finish(cell, cell.export.record["status"], missing[0].get("reason") if missing else None)

    def finish(self, cell: Cell, status: str, reason: str | None) -> None:
        cell.status, cell.reason = status, reason
        self.progress.skipped(sum(1 for t in cell.timings if t.record is None))
        self.progress.cell_done(cell)

    def stop(self, by: str, reason: str, exit_code: int) -> None:
        """The run ends early: every cell not finished is `cancelled`, with the reason."""
        self.stopped = {"by": by, "reason": reason, "exit_code": exit_code}
        for cell in self.cells:
            if cell.status is None:
                cell.status, cell.reason = "cancelled", f"not finished: {reason}"

    # -- outcome ---------------------------------------------------------------------------------------
    def exit_code(self) -> int:
        """The early end's code when it ended early; else 4 when a check failed, else 1 when something
        raised, else 3 when nothing could run here, else 0."""
        if self.stopped is not None:
            return self.stopped["exit_code"]
        statuses = {c.status for c in self.cells}
        if "failed" in statuses:
            return ExitCode.PARITY
        if "error" in statuses:
            return ExitCode.FAILURE
        if not statuses & set(OK):
            return ExitCode.UNAVAILABLE
        return ExitCode.OK


def fixed_batch(record: dict) -> int | None:
    """The one batch size an artifact takes, or None when its batch is dynamic."""
    shape = record.get("input_shape") or []
    return shape[0] if shape and isinstance(shape[0], int) else None


def reads_local_files(plan: Plan, e: Export) -> bool:
    """Whether an export reads files of this machine (which a pool of several machines must respect)."""
    import dataclasses

    from vitexport.matrix.plan import names_a_path

    spec = e.model.spec
    prefix, _, rest = spec.model.partition(":")
    user_code = bool(rest) and prefix not in ("torchvision", "timm", "hf")
    option_paths = any(names_a_path(f) and getattr(e.target.options, f.name) is not None
                       for f in dataclasses.fields(e.target.options))
    return bool(spec.weights or prefix == "hf" or user_code or plan.check.images or option_paths)


class Progress:
    """One line per finished cell, with an ETA from the work done so far: each kind of job's mean
    duration, times the jobs left, over the rate the pool has been getting through work."""

    def __init__(self, write: Callable[[str], None] | None):
        self.write = write or (lambda line: None)
        self.total = self.done = 0
        self.left = {"export": 0, "timing": 0}
        self.seconds: dict[str, list[float]] = {"export": [], "timing": []}
        self.t0 = time.monotonic()

    def start(self, exports: int, timings: int) -> None:
        self.left = {"export": exports, "timing": timings}
        self.t0 = time.monotonic()

    def job_done(self, kind: str, seconds: float | None = None) -> None:
        """One export or timing less to do; `seconds` it took when it ran (not for a cached one)."""
        self.left[kind] = max(0, self.left[kind] - 1)
        if seconds is not None:
            self.seconds[kind].append(seconds)

    def skipped(self, timings: int) -> None:
        """Timings that will not run (their export failed, their device is missing)."""
        self.left["timing"] = max(0, self.left["timing"] - timings)

    def eta(self) -> float | None:
        means = {k: sum(v) / len(v) for k, v in self.seconds.items() if v}
        if not means:
            return None
        fallback = max(means.values())
        work_left = sum(n * means.get(k, fallback) for k, n in self.left.items())
        work_done = sum(sum(v) for v in self.seconds.values())
        elapsed = time.monotonic() - self.t0
        return work_left / (work_done / elapsed) if work_done > 0 and elapsed > 0 else None

    def cell_done(self, cell: Cell) -> None:
        self.done += 1
        self.write(f"[{self.done}/{self.total}] {cell.id}: {describe(cell)}"
                   + _eta_text(self.eta(), self.done, self.total))


def _eta_text(eta: float | None, done: int, total: int) -> str:
    if done >= total or eta is None:  # nothing has run yet (every cell so far came from the cache)
        return ""
    return f"; ETA {_duration(eta)}"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def describe(cell: Cell) -> str:
    """What a finished cell came to, in a few words: its status, the numbers that matter, where from."""
    e = cell.export
    parts = [cell.status]
    if cell.status in OK:
        rows = [r for t in cell.timings for r in (t.record or {}).get("rows", []) if r.get("available")]
        parts += [f"p50 {milliseconds(r['latency_ms']['p50'])} at batch {r['batch_size']}" for r in rows]
        cosine = ((e.record or {}).get("parity") or {}).get("cosine_similarity")
        if cosine is not None:
            parts.append(f"cosine {cosine:.6f}")
    if cell.reason:
        parts.append(cell.reason if len(cell.reason) <= 160 else cell.reason[:159] + "…")
    cached = [e.cached] + [t.cached for t in cell.timings if t.record is not None]
    if cell.status in OK and all(cached):
        parts.append("cached")
    return ", ".join(parts)


def run(plan: Plan, out: str | Path = "vitexport-out/matrix", *, workers: int = 1, ray: str | None = None,
        device: str = "local", node_wait: float | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run `plan` into `out` and return the merged report (`report["matrix"]["exit_code"]` says how it went).

    `workers`: export processes on this machine (timings always run alone); `ray`: "local" to start a
    Ray cluster here, or the address of one to join; `device`: this machine's name among the plan's
    devices (and the device resource of a local Ray cluster); `node_wait`: on Ray, how long timings
    wait for a node that carries their device to join once none is left (default 60 s).

    A run that ends early writes the report of what finished and raises: `ClusterLost` (its
    `result` is that report) when the Ray cluster went away, KeyboardInterrupt or `Terminated` (with
    `result`, and `cancelled`: the work that was stopped) on a signal. On Ray, the calls into Ray run
    in a process of their own (`vitexport.matrix.ray_driver`), so a crash inside Ray is a lost
    cluster here too."""
    from vitexport.core.options import check_number
    from vitexport.export.staging import prepare_out_dir
    from vitexport.matrix import merged
    from vitexport.matrix.plan import DEVICE_NAME

    check_number(workers, "--workers", minimum=1, maximum=1024)
    if node_wait is not None:
        check_number(node_wait, "--node-wait", minimum=0, maximum=7 * 24 * 3600)
    if not DEVICE_NAME.match(device):
        from vitexport.core.errors import UsageError

        raise UsageError(f"--device {device!r} is not a device name (letters, digits, _ . -; at most 64)")
    out = prepare_out_dir(out).resolve()
    merged.check_writable(out, plan)
    for own in ("cache", "artifacts", "logs"):  # the matrix's folders: a file or link there is refused now
        writer.folder(out / own, create=False)
    matrix = Matrix(plan, out, progress)  # every key, and so every input file's digest, before any work
    pool = make_pool(ray, workers, device, out, node_wait, matrix.progress.write)
    try:
        matrix.run(pool)
    except BaseException as error:
        e = signal_in(error) or error  # a signal that surfaced through a C extension as SystemError
        ending = early_end(e)
        try:
            cancelled = pool.cancel(lost=isinstance(e, ClusterLost))
            if ending is None:  # a bug: nothing to add to it
                raise
            matrix.stop(*ending)
            report = write_stopped(matrix, pool.where())
        finally:
            pool.close()
        if isinstance(e, ClusterLost):
            done = sum(c.status not in ("cancelled", None) for c in matrix.cells)
            kept = f"{done} of {len(matrix.cells)} cells finished and are kept" + (
                f" (report: {report['files']['md']})" if report else "")
            raise ClusterLost(f"{e}; {kept}; {cancelled or 'nothing was left running'}; run it again to resume",
                              result=report) from None
        e.result, e.cancelled = report, cancelled  # for the CLI's line and --json
        raise e from None
    pool.close()
    return merged.write(matrix, where=pool.where())


def early_end(error: BaseException) -> tuple[str, str, int] | None:
    """(what ended the run, the reason its unfinished cells get, the exit code) for an interruption
    or a lost cluster; None for anything else."""
    from vitexport.core.termination import Terminated
    from vitexport.core.termination import exit_code as signal_exit_code

    if isinstance(error, ClusterLost):
        return "cluster", str(error), int(error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        return "SIGINT", "the run was interrupted (Ctrl-C)", signal_exit_code(error)
    if isinstance(error, Terminated):
        return str(error), f"the run was interrupted by {error}", signal_exit_code(error)
    return None


def write_stopped(matrix: Matrix, where: str) -> dict[str, Any] | None:
    """The report of a run that ended early, or None when it cannot be written (the early end is
    what the user must hear about, not a full disk on top of it)."""
    from vitexport.core.errors import VitexportError
    from vitexport.matrix import merged

    try:
        return merged.write(matrix, where=where)
    except (VitexportError, OSError):
        return None


def make_pool(ray: str | None, workers: int, device: str, out: Path, node_wait: float | None = None,
              say: Callable[[str], None] | None = None):
    if ray is None:
        from vitexport.matrix.local import LocalPool

        return LocalPool(workers, device, out)
    from vitexport.matrix.ray_driver import RayDriver
    from vitexport.matrix.ray_pool import NODE_WAIT_S

    return RayDriver(ray, device, NODE_WAIT_S if node_wait is None else node_wait, say)
