"""Benchmark orchestration: what each bench target runs, one fresh worker process per target and
batch size, and the report that puts them side by side.

The worker protocol: a JSON job on the worker's stdin (`python -m vitexport.bench_worker`), one JSON
line on its stdout: `{"ok": true, ...measurements}` or `{"ok": false, "reason": ...}`.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import backends, sidecar
from .backends.base import BenchTarget
from .errors import RegressionError, UsageError
from .options import check_number
from .progress import Progress, ProgressLike, using
from .sidecar import ArtifactRecord
from .sources import SourceSpec


def bench(spec: SourceSpec | None, targets: list[str], batches: list[int], *, artifacts: list[str | Path] = (),
          threads: int | None = None, warmup_iters: int = 5, warmup_s: float = 1.0, iters: int | None = None,
          budget_s: float | None = 5.0, seed: int = 0, out_dir: str | Path = "vitexport-out",
          roofline: bool = True, label: str | None = None, allow_fallback: bool = False, trust_code: bool = False,
          baseline: str | Path | None = None, max_slowdown: float | None = None, rounds: int = 1,
          progress: ProgressLike = None) -> dict[str, Any]:
    """Measure each target at each batch size, each in its own subprocess, on identical feeds.

    A GPU provider that ONNX Runtime cannot start makes its rows unavailable, unless `allow_fallback`
    accepts the provider that did run (recorded in each row's `provider`). With `rounds` > 1 every
    cell is measured that many times, the cells taking turns, and each row pools its rounds' samples:
    a machine whose speed drifts (other load, clocks) then slows every cell alike, so the ratios
    between rows hold even where absolute times do not. With a `baseline` report,
    each row is compared with its like there (`vitexport.regression`); rows slower beyond the
    threshold raise RegressionError carrying the report, after its files are written."""
    from . import fingerprint, regression, report as reports
    from .staging import prepare_out_dir

    known = backends.bench_targets()
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise UsageError(f"unknown bench backend(s) {', '.join(unknown)} (known: {', '.join(known)})")
    check_settings(batches, threads, warmup_iters, warmup_s, iters, budget_s)
    check_number(rounds, "--rounds", minimum=1, maximum=1000)
    regression.check_slowdown(max_slowdown)
    old = regression.load_bench_baseline(Path(baseline)) if baseline is not None else None
    threads = threads or fingerprint.usable_cores() or 1
    out = prepare_out_dir(out_dir)
    with using(progress) as reporter:
        report = measure_all(spec, targets, batches, artifacts=artifacts, threads=threads, warmup_iters=warmup_iters,
                             warmup_s=warmup_s, iters=iters, budget_s=budget_s, seed=seed, out=out,
                             roofline=roofline, label=label, allow_fallback=allow_fallback, trust_code=trust_code,
                             rounds=rounds, progress=reporter)
    if old is not None:
        report["baseline"] = regression.compare_bench(report, old, Path(baseline), max_slowdown)
    report["files"] = reports.write_all(report, out / f"bench-{safe_name(report['model'])}")
    if old is not None and report["baseline"]["regressions"]:
        raise RegressionError(regression.bench_message(report["baseline"]), report)
    return report


def measure_all(spec: SourceSpec | None, targets: list[str], batches: list[int], *, artifacts, threads: int,
                warmup_iters: int, warmup_s: float, iters: int | None, budget_s: float | None, seed: int, out: Path,
                roofline: bool, label: str | None, allow_fallback: bool, trust_code: bool, rounds: int,
                progress: Progress) -> dict[str, Any]:
    """The report's measurements: sources, one worker per cell (per round), the roofline."""
    from . import fingerprint, report as reports

    known = backends.bench_targets()
    sources, model_name, gflops = sources_for(spec, [known[t] for t in targets], batches, artifacts, out, seed,
                                              trust_code, progress)
    settings = {"threads": threads, "warmup_iters": warmup_iters, "warmup_s": warmup_s, "iters": iters,
                "allow_fallback": allow_fallback, "budget_s": budget_s, "seed": seed, "rounds": rounds,
                "mode": "end-to-end: host arrays in, host arrays out"}
    cells, results = [], []
    for name in targets:
        target = known[name]
        if allow_fallback:
            target = replace(target, run=replace(target.run, allow_fallback=True))
        be = backends.get(target.backend)
        # Every artifact of the target's backend is timed (an fp32 and an int8 ONNX side by side).
        for source, batch in [(s, b) for s in sources.get(target.backend if target.needs_artifact else "torch")
                              or [None] for b in batches]:
            row = {"backend": name, "batch_size": batch, "model": model_name,
                   "precision": source["record"].precision if source else "fp32",
                   "artifact": Path(source["artifact"]).name if source and source["artifact"] else None}
            results.append(row)
            reason = (be.bench_unavailable_for(target, source["record"]) if source
                      else be.bench_unavailable(target) or f"no {target.backend} artifact to run")
            if reason:
                row.update(available=False, reason=reason)
                continue
            job = {"backend": target.backend, "module": backends.REGISTRY[target.backend],
                   "artifact": source["artifact"], "record": source["record"].to_dict(), "batch": batch,
                   "threads": threads, "warmup_iters": warmup_iters, "warmup_s": warmup_s,
                   "iters": -(-iters // rounds) if iters else None, "budget_s": budget_s / rounds if budget_s else None,
                   "seed": seed, "run": vars(target.run), "samples": rounds > 1}
            cells.append((row, job, be, source))
    progress.step("timing", total=len(cells) * rounds)
    for r in range(rounds):
        for row, job, be, source in cells[r % len(cells):] + cells[:r % len(cells)] if cells else []:
            if row.get("available") is False:  # failed in an earlier round: not run again
                progress.advance()
                continue
            progress.note(f"{row['backend']} ({row['precision']}) at batch {row['batch_size']}"
                          + (f", round {r + 1}/{rounds}" if rounds > 1 else ""))
            measured = run_worker(job, job["threads"])
            progress.advance()
            if not measured.pop("ok"):
                row.update(available=False, reason=measured["reason"])
                row.pop("rounds", None)  # a failed cell reports its reason, not its earlier samples
                continue
            row.setdefault("rounds", []).append(measured)
    for row, job, be, source in cells:
        if row.get("available") is not False:
            measured = pooled(row.pop("rounds"), job["batch"])
            row.update(available=True, reason=None, artifact_bytes=source["bytes"],
                       roofline_basis=basis(be, measured.get("provider"), row["precision"]), **measured)
    shape = sources["torch"][0]["record"].source.input_shape if "torch" in sources else None
    report = {"schema": reports.SCHEMA, "model": model_name, "label": label,
              "input_shape": ["batch", *shape[1:]] if shape else None,
              "fingerprint": fingerprint.fingerprint(threads), "settings": settings, "results": results,
              "roofline": None}
    if roofline:
        from .roofline import attach_fractions, cuda_gemm_rate, gemm_rate, int8_gemm_rate

        progress.step("measuring the GEMM roofline")
        report["roofline"] = {**gemm_rate(threads=threads), "model_gflop_per_image": gflops}
        bases = {r.get("roofline_basis") for r in results if r.get("available")}
        if "cpu-int8" in bases:  # int8 rows against the int8 rate measured here, now
            report["roofline_int8"] = int8_gemm_rate(threads=threads)
        if "cuda" in bases:
            report["roofline_cuda"] = cuda_gemm_rate()  # GPU rows are measured against the GPU's rate
        attach_fractions(report, gflops)
    return report


def pooled(rounds: list[dict], batch: int) -> dict:
    """One row from its rounds: statistics over every round's samples; load time and first inference
    from the first (cold) round; peak memory the highest."""
    if len(rounds) == 1:
        return rounds[0]
    from .bench import LatencyStats

    stats = LatencyStats([ms for r in rounds for ms in r.pop("samples_ms")], batch).to_dict()
    for r in rounds[1:]:
        r.pop("samples_ms", None)
    return {**rounds[0], **stats, "rounds": len(rounds),
            "peak_rss_mb": max(r.get("peak_rss_mb") or 0 for r in rounds) or None}


def basis(be, provider: str | None, precision: str) -> str | None:
    """The GEMM rate a row is measured against: its processor's, at its precision (an int8 graph on
    the CPU against the CPU's int8 rate, so neither fp32 nor int8 rows are flattered)."""
    kind = be.roofline_basis(provider)
    return f"{kind}-int8" if kind == "cpu" and precision == "int8" else kind


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
    Returns ({backend: [{"artifact", "record", "bytes"}, ...]}, model name, GFLOP per image)."""
    from .pipeline import export, trusted_spec
    from .sources import load

    records: dict[str, dict] = {}
    for path in artifacts:
        record = sidecar.read(Path(path))
        # The torch rows rebuild the recorded model: only with code the user trusts, never unpickling.
        record.source.spec = trusted_spec(record, trust_code, allow_pickle=False).to_dict()
        records.setdefault(record.backend, []).append(
            {"artifact": str(path), "record": record, "bytes": size_of(Path(path), record)})
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


def run_worker(job: dict, threads: int) -> dict:
    """Run one measurement in a fresh interpreter with the thread count fixed before any import."""
    import json
    import subprocess
    import sys

    from .bench import thread_env

    env = {**os.environ, **thread_env(threads)}
    proc = subprocess.run([sys.executable, "-m", "vitexport.bench_worker"], input=json.dumps(job, default=str),
                          capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "reason": f"worker exited {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])
