"""`vitexport optimize`: build every candidate that every runtime able to run the target here offers
(ONNX Runtime's fp32, optimised fp32, int8 dynamic and static, fp16 on a GPU; OpenVINO's fp32, bf16
and int8 with its float part in each precision the CPU computes natively; ...), verify each against
PyTorch with its accuracy gate, time them all in one benchmark run (each runtime in its own worker
processes, the cells taking turns), and publish the fastest that passed, whatever its runtime, saying
why in its sidecar. No precision is ruled faster in advance: which one wins depends on the machine.

Each backend says what it offers through `Backend.candidates(target, ...)`, and each candidate names
the bench target that times it, so a new runtime competes by declaring its candidates, nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitexport import backends
from vitexport.backends.base import Candidate
from vitexport.core.errors import BackendUnavailable, ParityError, UsageError
from vitexport.core.progress import ProgressLike, as_progress
from vitexport.core.words import milliseconds
from vitexport.export import sidecar
from vitexport.export.pipeline import Gate, export
from vitexport.models.sources import SourceSpec

TARGETS = ("cpu", "cuda")
# Timing rounds: the candidates take turns in short bursts, samples pooled. Enough rounds for the A/B
# gate's paired interval, so that a candidate clearly slower than the fastest (beyond RETIRE_SLOWER)
# stops taking turns once the gate can say so: it cannot win, and timing it further buys nothing.
ROUNDS = 12
RETIRE_SLOWER = 1.10
# Seconds of timed runs per candidate: twelve bursts of bench's standard length (bench.session.BURST_S),
# short enough that the two sides of a pair see the same phase of a noisy machine.
BUDGET_S = 3.0
# Each worker's warm-up before the rounds (at least WARMUP_ITERS runs and WARMUP_S); every burst begins
# with a warm-up run of its own, and the candidates are ranked on rounds paired in time, so a longer
# one buys nothing here but start-up time.
WARMUP_S = 0.2
WARMUP_ITERS = 1


def optimize(spec: SourceSpec, *, only: list[str] | None = None, target: str = "cpu",
             images: str | Path | None = None, calibration_images: str | Path | None = None,
             gate: Gate | None = None, batches: list[int] = (1,), out_dir: str | Path = "vitexport-out",
             name: str | None = None, seed: int = 0, threads: int | None = None, budget_s: float = BUDGET_S,
             rounds: int = ROUNDS, thorough: bool = False, progress: ProgressLike = None) -> dict[str, Any]:
    """Return {"candidates": [...], "chosen": label or None, "backend": its backend, "artifact": path or
    None, "picks": [...], "bench": report files, "runtimes": {bench target: None or why it cannot run here}}.

    The candidates are ranked at every batch in `batches`: the pick at the first is published as
    NAME-optimized (`chosen`, `artifact`), a different pick at a later batch N as NAME-optimized-bN;
    `picks` lists each batch's pick and where it was published.

    `only`: the backends whose candidates compete (default: every registered one). `thorough`: also
    the candidates that take minutes to build (`Candidate.slow`)."""
    progress = as_progress(progress)
    from vitexport.bench.run import bench, check_settings
    from vitexport.report.files import write_all
    from vitexport.core.options import check_number
    from vitexport.export.staging import check_replaceable, prepare_out_dir
    from vitexport.models.sources import load

    if target not in TARGETS:
        raise UsageError(f"--target must be one of {', '.join(TARGETS)}, got {target!r}")
    gate = gate or Gate()
    gate.check()
    batches = list(dict.fromkeys(batches))  # a batch given twice is timed and ranked once
    check_settings(batches, threads, 0, min(WARMUP_S, budget_s), None, budget_s)  # before any export
    check_number(rounds, "--rounds", minimum=1, maximum=100)
    calibration = str(calibration_images or images) if (calibration_images or images) else None
    offered, runtimes, not_built = gather(target, calibration, only, thorough)
    if not offered and not_built:
        raise UsageError(f"every candidate for --target {target} takes minutes to build "
                         f"({', '.join(not_built)}): pass --thorough")
    if not offered:  # every candidate would be built for nothing
        why = "; ".join(f"{timer} cannot run here: {reason}" for timer, reason in runtimes.items() if reason)
        raise BackendUnavailable(f"--target {target}: " + (why or "no backend offers candidates for it"))
    out = prepare_out_dir(out_dir)
    loaded = load(spec)  # once: every candidate is built from it, and PyTorch's outputs are computed once
    stem = name or loaded.name + "-optimized"
    # Before any candidate is built: every name the picks may be published under is free or vitexport's.
    names = [stem, *(f"{stem}-b{b}" for b in batches[1:])]
    check_replaceable(out, [f"{n}{suffix}{ext}" for suffix in {backends.get(b).suffix for b, _ in offered}
                            for n in names for ext in ("", ".json")])
    work = out / "candidates"
    rows = []
    for backend, candidate in offered:
        progress.step(f"candidate {candidate.label}: exporting and checking")
        options = planned_for(candidate.options, batches)
        row = {"candidate": candidate.label, "backend": backend, "runtime": candidate.timer,
               "precision": candidate.options.precision, "options": options.to_dict()}
        try:
            result = export(backend, spec, options, work, images=images, seed=seed, gate=gate,
                            name=candidate.label, progress=progress, loaded=loaded)
            row.update(passed=result["status"] == "verified", artifact=result["artifact"], parity=result["parity"])
            if not row["passed"]:  # built, but not checked here: it is never picked
                row["reason"] = f"not checked here: {(result['parity'] or {}).get('skipped') or result['status']}"
        except ParityError as e:  # kept for the table, never chosen
            row.update(passed=False, artifact=e.result.get("artifact"), parity=e.result.get("parity"),
                       reason=str(e).split(":", 1)[-1].strip())
        rows.append(row)
    passing = [r for r in rows if r["passed"]]
    report = None
    if passing:
        progress.step("timing every passing candidate in one benchmark run")
        # Ranking needs the candidates side by side, not the machine's GEMM rate (bench reports it).
        timers = list(dict.fromkeys(r["runtime"] for r in passing))
        report = bench(None, timers, batches, artifacts=[r["artifact"] for r in passing], threads=threads,
                       warmup_iters=WARMUP_ITERS, warmup_s=min(WARMUP_S, budget_s), budget_s=budget_s, seed=seed,
                       out_dir=work, roofline=False, rounds=rounds, retire_slower=RETIRE_SLOWER, start_together=True,
                       progress=progress, write_files=write_all)
        attach_speed(rows, report, batches)
    # The fastest at each batch: which one wins can change with the batch (one runtime's kernels
    # gain more from a larger batch than another's), so each batch's pick is published.
    ranked = [(b, row) for b in batches if (row := fastest(rows, b)) is not None]
    chosen = ranked[0][1] if ranked else None
    artifacts: dict[str, str] = {}  # candidate -> where it was published
    for batch, row in ranked:
        if row["candidate"] not in artifacts:
            won = [b for b, r in ranked if r is row]
            artifacts[row["candidate"]] = publish(row, spec, out, stem if row is chosen else f"{stem}-b{batch}",
                                                  reason(row, rows, target, won), images=images, seed=seed, gate=gate,
                                                  loaded=loaded, progress=progress)
    picks = [{"batch": b, "candidate": r["candidate"], "backend": r["backend"], "runtime": r["runtime"],
              "p50_ms": speed_at(r, b)["p50_ms"], "artifact": artifacts[r["candidate"]]} for b, r in ranked]
    result = {"target": target, "runtimes": runtimes, "not_built": not_built, "candidates": rows,
              "chosen": chosen["candidate"] if chosen else None, "backend": chosen["backend"] if chosen else None,
              "artifact": artifacts.get(chosen["candidate"]) if chosen else None, "picks": picks,
              "bench": report["files"] if report else None}
    if chosen is None:
        raise ParityError("no candidate passed its check and accuracy gate; see the table", result)
    return result


def gather(target: str, calibration: str | None, only: list[str] | None, thorough: bool = False
           ) -> tuple[list[tuple[str, Candidate]], dict[str, str | None], list[str]]:
    """Every backend's candidates for `target` whose runtime runs here, as (backend, candidate); each
    runtime asked for: None when it runs here, else why not; and the labels of the slow candidates
    left out (all of them unless `thorough`), whose backends are not asked about on their account."""
    known = backends.bench_targets()
    names = list(backends.REGISTRY) if only is None else list(only)
    offered, runtimes, labels, left_out = [], {}, set(), []
    for backend in names:
        be = backends.get(backend)
        # Candidates first: a backend that offers none for this target is not imported (Core ML's
        # library alone takes seconds to import, for nothing on a CPU target).
        offers = be.candidates(target, calibration) if be.exports else []
        left_out += [c.label for c in offers if c.slow and not thorough]
        offers = [c for c in offers if thorough or not c.slow]
        if not offers or not be.availability().ok:
            continue
        for candidate in offers:
            timer = known.get(candidate.timer)
            if timer is None or timer.backend != backend:
                raise UsageError(f"{backend} offers {candidate.label} timed by {candidate.timer!r}, which is not "
                                 f"one of its bench targets")
            if candidate.label in labels:
                raise UsageError(f"two backends offer a candidate labelled {candidate.label!r}")
            labels.add(candidate.label)
            if timer.name not in runtimes:
                runtimes[timer.name] = backends.get(timer.backend).bench_unavailable(timer)
            if runtimes[timer.name] is None:
                offered.append((backend, candidate))
    return offered, runtimes, left_out


def planned_for(options, batches) -> Any:
    """A dynamic-batch candidate built and checked for the largest batch it will be timed at, where that
    is above the default bound (an ExecuTorch program's memory is planned for its bound)."""
    import dataclasses

    if options.dynamic_batch and max(batches) > options.check_max_batch:
        return dataclasses.replace(options, max_batch=max(batches))
    return options


def publish(row: dict, spec: SourceSpec, out: Path, name: str, why: dict, *, images, seed: int,
            gate: Gate, loaded, progress) -> str:
    """Export a candidate again under its final name (names live inside some artifacts, e.g. an ONNX's
    external weights), verify it again, and write in its sidecar why it won; return its path."""
    progress.step(f"publishing {row['candidate']} as {name}")
    be = backends.get(row["backend"])
    options = be.Options(**{k: tuple(v) if isinstance(v, list) else v for k, v in row["options"].items()})
    result = export(row["backend"], spec, options, out, images=images, seed=seed, gate=gate, name=name,
                    progress=progress, loaded=loaded)
    published = Path(result["artifact"])
    record = sidecar.read(published)
    record.info["optimize_choice"] = why
    sidecar.write(sidecar.path_for(published), record)
    return str(published)


def attach_speed(rows: list[dict], report: dict, batches: list[int]) -> None:
    """Each candidate's p50 at every batch timed from the bench report, and its speed-up over the
    first fp32 candidate (ONNX Runtime's plain export, the first backend's) at that batch, under
    `by_batch` ({"1": {...}, "8": {...}}); the first batch's also on the row itself."""
    for batch in batches:
        by_artifact = {r["artifact"]: r for r in report["results"]
                       if r.get("available") and r["batch_size"] == batch}
        for row in rows:
            measured = by_artifact.get(Path(row["artifact"]).name) if row.get("artifact") and row["passed"] else None
            speed = {"p50_ms": measured["latency_ms"]["p50"] if measured else None}
            if measured and measured.get("retired"):
                speed["timing"] = measured["retired"]
            row.setdefault("by_batch", {})[str(batch)] = speed
            if batch == batches[0]:
                row["bytes"] = measured.get("artifact_bytes") if measured else None
                row["provider"] = measured.get("provider") if measured else None
        base = next((r["by_batch"][str(batch)]["p50_ms"] for r in rows
                     if r["precision"] == "fp32" and r["by_batch"][str(batch)]["p50_ms"]), None)
        for row in rows:
            speed = row["by_batch"][str(batch)]
            speed["speedup"] = base / speed["p50_ms"] if base and speed["p50_ms"] else None
    for row in rows:
        row.update(speed_at(row, batches[0]))


def speed_at(row: dict, batch: int | None) -> dict:
    """The row's {p50_ms, speedup[, timing]} at `batch`; its own (the first batch's) where it has
    none for that batch, or `batch` is None."""
    return (row.get("by_batch", {}).get(str(batch))
            or {k: row[k] for k in ("p50_ms", "speedup", "timing") if k in row})


def fastest(rows: list[dict], batch: int | None = None) -> dict | None:
    """The passing candidate with the lowest p50 at `batch` (default: the row's own p50)."""
    timed = [r for r in rows if r["passed"] and speed_at(r, batch).get("p50_ms")]
    return min(timed, key=lambda r: speed_at(r, batch)["p50_ms"]) if timed else None


def reason(chosen: dict, rows: list[dict], target: str, batches: list[int]) -> dict:
    """What the published sidecar says of the choice: at each batch it won, its p50 and the others'."""
    base = next((r for r in rows if r["precision"] == "fp32" and speed_at(r, batches[0]).get("p50_ms")), None)
    whys = []
    for batch in batches:
        mine = speed_at(chosen, batch)
        whys.append(f"{milliseconds(mine['p50_ms'])} p50 at batch {batch} in {chosen['runtime']}"
                    + (f", {mine['speedup']:.2f}x {base['candidate']} in {base['runtime']}"
                       if mine.get("speedup") and base is not None and base is not chosen else ""))
    others = {r["candidate"]: _standing(r, batches) for r in rows if r is not chosen}
    return {"chosen": chosen["candidate"], "runtime": chosen["runtime"], "target": target, "batch": batches[0],
            "batches": batches, "why": "fastest candidate that passed its check and accuracy gate: " + "; ".join(whys),
            "others": others}


def _standing(row: dict, batches: list[int]) -> str:
    """Where a candidate that was not chosen stood: failed, or its p50 at each batch timed."""
    if not row["passed"]:
        return "failed its check: " + row.get("reason", "")[:120]
    times = [(b, speed_at(row, b).get("p50_ms")) for b in batches]
    if not any(t for _, t in times):
        return "not timed"
    at = (lambda b: f" at batch {b}") if len(batches) > 1 else (lambda b: "")
    return "; ".join(f"{milliseconds(t)}{at(b)}" for b, t in times if t) + f" in {row['runtime']}"
