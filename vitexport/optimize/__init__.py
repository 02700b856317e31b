"""`vitexport optimize`: build every candidate that every runtime able to run the target here offers
(ONNX Runtime's fp32, optimised fp32, int8 dynamic and static, fp16 on a GPU; OpenVINO's fp32, bf16
and int8 with its float part in each precision the CPU computes natively; ...), time them all in one
benchmark run (each runtime in its own worker processes, the cells taking turns), check them against
PyTorch with their accuracy gate in order of speed until one passes, and publish it, whatever its
runtime, saying why in its sidecar. A candidate slower than one that passed can never be the pick, so
it is not checked (`check_all` checks every one, and picks the same). No precision is ruled faster in
advance: which one wins depends on the machine.

Built candidates, checks and timings are cached under OUT/candidates (vitexport.optimize.cache), so a
second run on the same model builds nothing.

Each backend says what it offers through `Backend.candidates(target, ...)`, and each candidate names
the bench target that times it, so a new runtime competes by declaring its candidates, nothing else.

May import every room below the backend plug-ins (core, models, verify, the backend spec, export,
bench, report) and matrix's cache keys; never a backend plug-in, the API or the CLI.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vitexport import backends
from vitexport.backends.base import Candidate
from vitexport.core.errors import BackendUnavailable, ParityError, UsageError
from vitexport.core.progress import ProgressLike, as_progress
from vitexport.export import sidecar
from vitexport.export.pipeline import Gate, export
from vitexport.models.sources import SourceSpec
from vitexport.optimize.ranking import attach_speed, fastest, reason, speed_at  # noqa: F401 (the module's API)

TARGETS = ("cpu", "cuda")
# Timing rounds: the candidates take turns in short bursts, samples pooled. Enough rounds for the A/B
# gate's paired interval, so that a candidate clearly slower than the fastest (beyond RETIRE_SLOWER)
# stops taking turns once the gate can say so: it cannot win, and timing it further buys nothing.
ROUNDS = 12
RETIRE_SLOWER = 1.10
# And a candidate beyond twice the fastest in each of the first two rounds (the fp32 rows beside the int8
# ones: 2.5-3x on a Zen 4) stops at once. Twice, because on a shared 2-vCPU machine one runtime's
# timings can move by up to 45 % for tens of seconds while another's do not: a screen tighter than
# that could stop a winner.
RETIRE_SCREEN = 2.0
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
             rounds: int = ROUNDS, thorough: bool = False, check_all: bool = False, cache: bool = True,
             progress: ProgressLike = None) -> dict[str, Any]:
    """Return {"candidates": [...], "chosen": label or None, "backend": its backend, "artifact": path or
    None, "picks": [...], "bench": report files, "runtimes": {bench target: None or why it cannot run here},
    "checked": labels checked, "cache": what was reused, "timings": seconds per phase}.

    The candidates are ranked at every batch in `batches`: the pick at the first is published as
    NAME-optimized (`chosen`, `artifact`), a different pick at a later batch N as NAME-optimized-bN;
    `picks` lists each batch's pick and where it was published.

    `only`: the backends whose candidates compete (default: every registered one). `thorough`: also
    the candidates that take minutes to build (`Candidate.slow`). `check_all`: check every candidate,
    not only those faster than the first that passes. `cache` False: reuse nothing from earlier runs
    (what this one builds, checks and times replaces it)."""
    progress = as_progress(progress)
    from vitexport.bench.run import check_settings
    from vitexport.core.options import check_number
    from vitexport.export.staging import check_replaceable, prepare_out_dir
    from vitexport.models.sources import load
    from vitexport.optimize.cache import Cache
    from vitexport.optimize.steps import Steps

    started = time.perf_counter()
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
    store = Cache(out / "candidates", reuse=cache)  # before any work: a file in its place is refused
    t0 = time.perf_counter()
    loaded = load(spec)  # once: every candidate is built from it, and PyTorch's outputs are computed once
    gate.check(loaded.task)
    load_s = time.perf_counter() - t0
    stem = name or loaded.name + "-optimized"
    # Before any candidate is built: every name the picks may be published under is free or vitexport's.
    names = [stem, *(f"{stem}-b{b}" for b in batches[1:])]
    check_replaceable(out, [f"{n}{suffix}{ext}" for suffix in {backends.get(b).suffix for b, _ in offered}
                            for n in names for ext in ("", ".json")])
    steps = Steps(loaded, store, images=images, seed=seed, gate=gate, batches=batches, progress=progress)
    rows, planned = [], []
    for backend, candidate in offered:
        options = planned_for(candidate.options, batches)
        planned.append(options)
        rows.append({"candidate": candidate.label, "backend": backend, "runtime": candidate.timer,
                     "precision": candidate.options.precision, "options": options.to_dict()})
    steps.build_all(rows, planned)
    timing = {"threads": threads, "warmup_iters": WARMUP_ITERS, "warmup_s": min(WARMUP_S, budget_s),
              "budget_s": budget_s, "rounds": rounds, "retire_slower": RETIRE_SLOWER,
              "retire_screen": RETIRE_SCREEN}
    report = steps.settle(rows, timing, check_all)
    # The fastest at each batch: which one wins can change with the batch (one runtime's kernels
    # gain more from a larger batch than another's), so each batch's pick is published.
    t0 = time.perf_counter()
    ranked = [(b, row) for b in batches if (row := fastest(rows, b)) is not None]
    chosen = ranked[0][1] if ranked else None
    artifacts: dict[str, str] = {}  # candidate -> where it was published
    for batch, row in ranked:
        if row["candidate"] not in artifacts:
            won = [b for b, r in ranked if r is row]
            why = reason(row, rows, target, won) | {"check_inputs": steps.check_inputs}
            artifacts[row["candidate"]] = publish(row, spec, out, stem if row is chosen else f"{stem}-b{batch}", why,
                                                  images=images, seed=seed, gate=gate, loaded=loaded,
                                                  progress=progress, reuse=cache)
    picks = [{"batch": b, "candidate": r["candidate"], "backend": r["backend"], "runtime": r["runtime"],
              "p50_ms": speed_at(r, b)["p50_ms"], "artifact": artifacts[r["candidate"]]} for b, r in ranked]
    store.prune()
    seconds = {"load_s": load_s, **steps.seconds, "publish_s": time.perf_counter() - t0,
               "total_s": time.perf_counter() - started}
    result = {"target": target, "runtimes": runtimes, "not_built": not_built, "candidates": rows,
              "chosen": chosen["candidate"] if chosen else None, "backend": chosen["backend"] if chosen else None,
              "artifact": artifacts.get(chosen["candidate"]) if chosen else None, "picks": picks,
              "bench": report["files"] if report else None, "check_all": check_all,
              "checked": [r["candidate"] for r in rows if r["checked"]],
              "cache": {"folder": str(store.root), "reuse": cache, **store.stats},
              "built_aside": steps.aside_note, "timings": seconds}
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
            gate: Gate, loaded, progress, reuse: bool = True) -> str:
    """Publish a candidate under its final name, checked again: its files copied under that name where
    that is the same artifact (vitexport.optimize.adopt), else exported again (names live inside some
    artifacts, e.g. an ONNX's external weights); unless (`reuse`) the artifact published there already is
    that candidate, verified on the same check inputs and unchanged (a second run); write in its
    sidecar why it won; return its path."""
    from vitexport.export.pipeline import reusable
    from vitexport.optimize.adopt import adopt
    from vitexport.optimize.steps import options_of

    be = backends.get(row["backend"])
    options = be.Options(**options_of(row["options"]))
    published = out / f"{name}{be.suffix}"
    record = reusable(published, be, loaded, options)
    earlier = (record.info.get("optimize_choice") or {}).get("check_inputs") if record else None
    if not reuse or record is None or record.seed != seed or earlier != why["check_inputs"]:
        progress.step(f"publishing {row['candidate']} as {name}")
        # Its files copied under the name and checked, where that is the same artifact; else built again.
        result = adopt(Path(row["artifact"]), out, name, loaded=loaded, images=images, seed=seed, gate=gate,
                       progress=progress) or \
            export(row["backend"], spec, options, out, images=images, seed=seed, gate=gate, name=name,
                   progress=progress, loaded=loaded)
        published = Path(result["artifact"])
        record = sidecar.read(published)
    record.info["optimize_choice"] = why
    sidecar.write(sidecar.path_for(published), record)
    return str(published)
