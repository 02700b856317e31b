"""`vitexport optimize`: build every candidate a backend offers (fp32, optimised fp32, int8 dynamic,
int8 static, fp16 where the target runs it), verify each against PyTorch with its accuracy gate, time
them all in one benchmark run, and publish the fastest that passed, saying why in its sidecar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import backends, sidecar
from .errors import BackendUnavailable, ParityError, UsageError
from .pipeline import Gate, export
from .progress import ProgressLike, as_progress
from .sources import SourceSpec

TARGETS = {"cpu": "onnxruntime", "cuda": "onnxruntime-cuda"}  # target -> bench target that times it


def optimize(spec: SourceSpec, *, backend: str = "onnx", target: str = "cpu", images: str | Path | None = None,
             calibration_images: str | Path | None = None, gate: Gate | None = None, batches: list[int] = (1,),
             out_dir: str | Path = "vitexport-out", name: str | None = None, seed: int = 0, threads: int | None = None,
             budget_s: float = 5.0, progress: ProgressLike = None) -> dict[str, Any]:
    """Return {"candidates": [...], "chosen": label or None, "artifact": path or None, "bench": report}."""
    progress = as_progress(progress)
    from .benchrun import bench, check_settings
    from .sources import load
    from .staging import prepare_out_dir

    if target not in TARGETS:
        raise UsageError(f"--target must be one of {', '.join(TARGETS)}, got {target!r}")
    be = backends.get(backend)
    gate = gate or Gate()
    gate.check()
    check_settings(list(batches), threads, 0, min(1.0, budget_s), None, budget_s)  # before any export
    timer = backends.bench_targets()[TARGETS[target]]
    why = backends.get(timer.backend).bench_unavailable(timer)
    if why:  # every candidate would pass and none could be timed
        raise BackendUnavailable(f"--target {target}: {timer.name} cannot run here: {why}")
    out = prepare_out_dir(out_dir)
    stem = name or load(spec).name + "-optimized"
    work = out / "candidates"
    rows = []
    for label, options in be.candidates(target, str(calibration_images or images) if (calibration_images or images)
                                         else None):
        progress.step(f"candidate {label}: exporting and checking")
        row = {"candidate": label, "precision": options.precision, "options": options.to_dict()}
        try:
            result = export(backend, spec, options, work, images=images, seed=seed, gate=gate, name=label,
                            progress=progress)
            row.update(passed=True, artifact=result["artifact"], parity=result["parity"])
        except ParityError as e:  # kept for the table, never chosen
            row.update(passed=False, artifact=e.result.get("artifact"), parity=e.result.get("parity"),
                       reason=str(e).split(":", 1)[-1].strip())
        rows.append(row)
    passing = [r for r in rows if r["passed"]]
    report = None
    if passing:
        progress.step("timing every passing candidate in one benchmark run")
        # Ranking needs the candidates side by side, not the machine's GEMM rate (bench reports it).
        report = bench(None, [TARGETS[target]], list(batches), artifacts=[r["artifact"] for r in passing],
                       threads=threads, warmup_s=min(1.0, budget_s), budget_s=budget_s, seed=seed, out_dir=work,
                       roofline=False, progress=progress)
        attach_speed(rows, report, batches[0])
    chosen = fastest(rows)
    published = None
    if chosen is not None:
        # Exported again under the final name (names live inside some artifacts, e.g. an ONNX's
        # external weights), verified again, and told why it won.
        progress.step(f"publishing {chosen['candidate']} as {stem}")
        options = be.Options(**{k: tuple(v) if isinstance(v, list) else v for k, v in chosen["options"].items()})
        result = export(backend, spec, options, out, images=images, seed=seed, gate=gate, name=stem,
                        progress=progress)
        published = result["artifact"]
        record = sidecar.read(Path(published))
        record.info["optimize_choice"] = reason(chosen, rows, target, batches[0])
        sidecar.write(sidecar.path_for(Path(published)), record)
    result = {"backend": backend, "target": target, "candidates": rows,
              "chosen": chosen["candidate"] if chosen else None, "artifact": published,
              "bench": report["files"] if report else None}
    if chosen is None:
        raise ParityError("no candidate passed its check and accuracy gate; see the table", result)
    return result


def attach_speed(rows: list[dict], report: dict, batch: int) -> None:
    """Each candidate's p50 at `batch` from the bench report, and its speed-up over the fp32 one."""
    by_artifact = {r["artifact"]: r for r in report["results"] if r.get("available") and r["batch_size"] == batch}
    for row in rows:
        measured = by_artifact.get(Path(row["artifact"]).name) if row.get("artifact") else None
        row["p50_ms"] = measured["latency_ms"]["p50"] if measured else None
        row["bytes"] = measured.get("artifact_bytes") if measured else None
    base = next((r["p50_ms"] for r in rows if r["candidate"] == "fp32" and r.get("p50_ms")), None)
    for row in rows:
        row["speedup"] = base / row["p50_ms"] if base and row.get("p50_ms") else None


def fastest(rows: list[dict]) -> dict | None:
    timed = [r for r in rows if r["passed"] and r.get("p50_ms")]
    return min(timed, key=lambda r: r["p50_ms"]) if timed else None


def reason(chosen: dict, rows: list[dict], target: str, batch: int) -> dict:
    others = {r["candidate"]: (f"{r['p50_ms']:.3g} ms" if r.get("p50_ms") else "failed its check: "
                               + r.get("reason", "")[:120]) for r in rows if r is not chosen}
    return {"chosen": chosen["candidate"], "target": target, "batch": batch,
            "why": f"fastest candidate that passed its check and accuracy gate: {chosen['p50_ms']:.3g} ms p50 at "
                   f"batch {batch}" + (f", {chosen['speedup']:.2f}x the fp32 export" if chosen.get("speedup") else ""),
            "others": others}
