"""Orchestration shared by the CLI and Python users: export(), verify()."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import backends, sidecar
from .backends.base import ExportOptions
from .errors import BackendUnavailable, OutputError, ParityError, UsageError, WeightsError
from .inputs import DEFAULT_MAX_BATCH
from .sources import LoadedModel, SourceSpec

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def export(backend: str, spec: SourceSpec, options: ExportOptions | None = None, out_dir: str | Path = "vitexport-out",
           *, verify: bool = True, atol: float | None = None, rtol: float | None = None, seed: int = 0,
           images: str | Path | None = None, max_batch: int = DEFAULT_MAX_BATCH,
           progress: Progress = _quiet) -> dict[str, Any]:
    """Export `spec` with `backend` into `out_dir`, verify it against PyTorch, write artifact + sidecar.

    Raises ParityError (after writing both, the sidecar recording the failure) when outputs differ.
    """
    from . import parity
    from .sources import load

    options = options or ExportOptions()
    be = _available(backend)
    out = prepare_out_dir(out_dir)
    timings: dict[str, float] = {}
    progress(f"loading {spec.model}")
    t0 = time.perf_counter()
    loaded = load(spec)
    timings["load_s"] = time.perf_counter() - t0
    final = out / f"{loaded.name}{be.suffix}"
    with staging(out) as stage:
        progress(f"exporting {loaded.name} to {backend}")
        t0 = time.perf_counter()
        artifact = be.export(loaded, options, stage / final.name)
        timings["export_s"] = time.perf_counter() - t0
        record = _record(loaded, artifact, options, seed)
        report = None
        tol = parity.tolerance_for(artifact.precision, atol, rtol)  # what the artifact computes in
        runs_here = getattr(be, "runs_here", None)
        unable = runs_here() if runs_here is not None else None
        if verify and unable is not None and not unable.ok:
            # Built but not runnable here (an engine without a GPU): say what was and was not checked.
            report = {"passed": None, "skipped": unable.reason, **tol.to_dict()}
            record["parity"], record["provider"] = report, None
        elif verify:
            progress("checking against PyTorch")
            t0 = time.perf_counter()
            report, provider = check(loaded, be, artifact.path, record, tol, seed, images=images, max_batch=max_batch)
            timings["verify_s"] = time.perf_counter() - t0
            record["parity"], record["provider"] = report, provider
        record["artifact_sha256"] = sidecar.digest(artifact.path, _extra_files(artifact.path, record))
        sidecar.write(sidecar.path_for(artifact.path), record)
        publish(stage, out)
    result = _result(record, final, timings)
    if report is not None and report["passed"] is False:
        raise ParityError(f"{backend} artifact does not match PyTorch: " + "; ".join(report["failures"][:3]), result)
    return result


def verify(artifact: str | Path, *, atol: float | None = None, rtol: float | None = None,
           backend_options: dict[str, Any] | None = None, images: str | Path | None = None,
           max_batch: int = DEFAULT_MAX_BATCH, progress: Progress = _quiet) -> dict[str, Any]:
    """Re-check an existing artifact against the model recorded in its sidecar."""
    from . import parity
    from .sources import load

    path = Path(artifact)
    record = sidecar.read(path)
    be = _available(record["backend"])
    spec = SourceSpec.from_dict(record["source"]["spec"])
    if spec.weights:
        _check_weights_unchanged(spec, record["source"].get("weights_sha256"))
    progress(f"rebuilding {spec.model}")
    loaded = load(spec)
    tol = parity.tolerance_for(record.get("precision", "fp32"), atol, rtol)
    progress("checking against PyTorch")
    report, provider = check(loaded, be, path, record, tol, record.get("seed", 0), backend_options, images, max_batch)
    recorded_sha = record.get("artifact_sha256")
    current_sha = sidecar.digest(path, _extra_files(path, record))
    result = _result({**record, "parity": report, "provider": provider}, path, {})
    result["artifact_modified"] = recorded_sha is not None and recorded_sha != current_sha
    if not report["passed"]:
        raise ParityError(f"{record['backend']} artifact does not match PyTorch: " + "; ".join(report["failures"][:3]),
                          result)
    return result


def check(loaded: LoadedModel, be, artifact_path: Path, record: dict, tol, seed: int,
          backend_options: dict[str, Any] | None = None, images: str | Path | None = None,
          max_batch: int = DEFAULT_MAX_BATCH) -> tuple[dict, str]:
    """Run PyTorch and the artifact on the same inputs; return the parity report and the provider.

    Beyond elementwise parity: a batch sweep, a determinism check (the same input twice gives
    identical outputs), accuracy on labelled images, the backend's static lint, and, on failure,
    the first encoder block whose output leaves tolerance where the backend can tell.
    """
    from . import parity
    from .backends.eager import EagerRunner

    in_name, out_name = record["input_names"][0], record["output_names"][0]
    reference = EagerRunner(loaded.model, in_name, out_name)
    feeds, labels = _feeds(loaded, record, seed, images, max_batch)
    runs, image_outputs = [], {"reference": [], "candidate": []}
    with be.load(artifact_path, record, **(backend_options or {})) as runner:
        for feed_name, x, real in feeds:
            ref, cand = reference.run({in_name: x}), runner.run({in_name: x})
            runs.append((len(x), feed_name, _rows(ref, real), _rows(cand, real)))
            if feed_name.startswith("images"):
                image_outputs["reference"].append(ref[out_name][:real])
                image_outputs["candidate"].append(cand.get(out_name, ref[out_name])[:real])
        first = feeds[0][1]
        again = runner.run({in_name: first})
        deterministic = all(np.array_equal(again[k], runs[0][3][k]) for k in again if k in runs[0][3])
        provider = runner.provider
    report = parity.compare(runs, tol, record.get("precision", "fp32"))
    report["deterministic"] = deterministic
    if not deterministic:
        report["passed"] = False
        report["failures"].append("the artifact gave different outputs for the same input twice "
                                  "(dropout or another random op left active?)")
    if images is not None:
        report["images"] = _image_summary(images, image_outputs, labels)
    lint = getattr(be, "lint", None)
    if lint is not None:
        findings = lint(artifact_path, record)
        report["lint"] = findings
        for f in findings:
            if f["severity"] == "error":
                report["passed"] = False
                report["failures"].append(f"lint {f['rule']} at {f['node']}: {f['message']}")
    localize = getattr(be, "localize", None)
    if not report["passed"] and localize is not None:
        report["divergence"] = localize(loaded, artifact_path, record, first, tol)
    return report, provider


def _feeds(loaded: LoadedModel, record: dict, seed: int, images, max_batch: int):
    """(name, input array, real rows) for each run: seeded random batches, then the images if any.

    Artifacts that accept a fixed list of batch sizes (Core ML enumerated shapes) are checked at each.
    """
    from .inputs import chunks, load_images, random_pixels, verification_batches

    pre = loaded.preprocessing
    dynamic_batch = record["dynamic_batch"]
    info = record.get("info") or {}
    enumerated = info.get("batch_sizes")
    if info.get("profiles"):  # a TensorRT engine: check every profile's min, opt and max
        enumerated = sorted({b for profile in info["profiles"] for b in profile})
    batches = enumerated or verification_batches(loaded.input_shape, dynamic_batch, max_batch)
    feeds = []
    for batch in batches:
        x = random_pixels((batch, *loaded.input_shape[1:]), seed + batch, pre.get("mean"), pre.get("std"))
        feeds.append((f"random b={batch}", x, batch))
    labels = None
    if images is not None:
        x, labels, _names = load_images(images, pre, loaded.input_shape)
        batch = max(enumerated) if enumerated else max_batch if dynamic_batch else loaded.input_shape[0]
        for i, (part, real) in enumerate(chunks(x, batch)):
            feeds.append((f"images[{i * batch}:{i * batch + real}]", part, real))
    return feeds, labels


def _rows(outputs: dict[str, np.ndarray], real: int) -> dict[str, np.ndarray]:
    """Drop the padding rows a static batch needed."""
    return {k: v[:real] for k, v in outputs.items()}


def _image_summary(images, outputs: dict[str, list], labels: list[int] | None) -> dict:
    ref, cand = np.concatenate(outputs["reference"]), np.concatenate(outputs["candidate"])
    summary = {"directory": str(images), "count": int(len(ref)),
               "top1_agreement": float(np.mean(ref.reshape(len(ref), -1).argmax(1) ==
                                               cand.reshape(len(cand), -1).argmax(1)))}
    if labels is not None:
        truth = np.asarray(labels)
        summary["accuracy"] = {"reference": float(np.mean(ref.reshape(len(ref), -1).argmax(1) == truth)),
                               "candidate": float(np.mean(cand.reshape(len(cand), -1).argmax(1) == truth))}
    return summary


def prepare_out_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as e:
        raise OutputError(f"cannot write to output directory {out}: {e.strerror or e}") from None
    return out


@contextlib.contextmanager
def staging(out: Path):
    """A scratch folder inside the output folder: removed on any failure or interrupt, so a
    half-written artifact never appears at the target path."""
    stage = Path(tempfile.mkdtemp(prefix=".vitexport-", dir=out))
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def publish(stage: Path, out: Path) -> None:
    """Move every staged file into place; the sidecar goes last, so it never points at a missing artifact."""
    entries = sorted(stage.iterdir(), key=lambda p: p.name.endswith(".json"))
    for entry in entries:
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)


def _available(backend: str):
    be = backends.get(backend)
    availability = be.availability()
    if not availability.ok:
        raise BackendUnavailable(f"{backend} is unavailable here: {availability.reason}")
    return be


def _record(loaded: LoadedModel, artifact, options: ExportOptions, seed: int) -> dict[str, Any]:
    shape = list(loaded.input_shape)
    return {
        "backend": artifact.backend,
        "artifact": artifact.path.name,
        "created": sidecar.now(),
        "source": loaded.describe(),
        "seed": seed,
        "precision": artifact.precision,
        "input_names": artifact.input_names,
        "output_names": artifact.output_names,
        "input_shape": ["batch", *shape[1:]] if artifact.dynamic_batch else shape,
        "dynamic_batch": artifact.dynamic_batch,
        "export_options": {"opset": options.opset, "exporter": options.exporter, **options.extra},
        "info": artifact.info,
        "tools": sidecar.tool_versions(),
    }


def _extra_files(artifact_path: Path, record: dict) -> list[Path]:
    data = (record.get("info") or {}).get("external_data")
    return [artifact_path.with_name(data)] if data else []


def _check_weights_unchanged(spec: SourceSpec, recorded: str | None) -> None:
    from .sources import sha256_file

    path = Path(spec.weights)
    if not path.is_file():
        raise WeightsError(f"the weights recorded in the sidecar are gone: {path}")
    if recorded and sha256_file(path) != recorded:
        raise WeightsError(f"{path} changed since export (sha256 differs from the sidecar's)")


def _result(record: dict, artifact: Path, timings: dict) -> dict[str, Any]:
    return {
        "backend": record["backend"],
        "artifact": str(Path(artifact).resolve()),
        "sidecar": str(sidecar.path_for(Path(artifact)).resolve()),
        "provider": record.get("provider"),
        "model": record["source"]["spec"]["model"],
        "input_shape": record["input_shape"],
        "dynamic_batch": record["dynamic_batch"],
        "precision": record["precision"],
        "info": record.get("info", {}),
        "parity": record.get("parity"),
        "timings": timings,
    }


# Benchmark targets: name -> (backend that runs it, its load options, artifact it needs or None).
BENCH_TARGETS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "torch": ("torch", {}, None),
    "torch-cuda": ("torch", {"device": "cuda"}, None),
    "torchscript": ("torchscript", {}, "torchscript"),
    "onnxruntime": ("onnx", {"providers": ["CPUExecutionProvider"]}, "onnx"),
    "onnxruntime-cuda": ("onnx", {"providers": ["CUDAExecutionProvider"], "allow_fallback": False}, "onnx"),
    "onnxruntime-tensorrt": ("onnx", {"providers": ["TensorrtExecutionProvider"], "allow_fallback": False}, "onnx"),
    "coreml": ("coreml", {}, "coreml"),
    "tensorrt": ("tensorrt", {}, "tensorrt"),
}


def bench(spec: SourceSpec | None, targets: list[str], batches: list[int], *, artifacts: list[str | Path] = (),
          threads: int | None = None, warmup_iters: int = 5, warmup_s: float = 1.0, iters: int | None = None,
          budget_s: float | None = 5.0, seed: int = 0, out_dir: str | Path = "vitexport-out",
          roofline: bool = True, label: str | None = None, allow_fallback: bool = False,
          progress: Progress = _quiet) -> dict[str, Any]:
    """Measure each target at each batch size, each in its own subprocess, on identical feeds.

    A GPU provider that ONNX Runtime cannot start makes its rows unavailable, unless `allow_fallback`
    accepts the provider that did run (recorded in each row's `provider`)."""
    import os

    from . import fingerprint, report as reports

    unknown = [t for t in targets if t not in BENCH_TARGETS]
    if unknown:
        raise UsageError(f"unknown bench backend(s) {', '.join(unknown)} (known: {', '.join(BENCH_TARGETS)})")
    if not batches or min(batches) < 1:
        raise UsageError("--batch must be a positive integer")
    threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    out = prepare_out_dir(out_dir)
    records, model_name, gflops = _bench_sources(spec, targets, artifacts, out, seed, progress)
    settings = {"threads": threads, "warmup_iters": warmup_iters, "warmup_s": warmup_s, "iters": iters,
                "allow_fallback": allow_fallback,
                "budget_s": budget_s, "seed": seed, "mode": "end-to-end: host arrays in, host arrays out"}
    results = []
    for target in targets:
        runner_backend, load_options, needs = BENCH_TARGETS[target]
        if allow_fallback and "allow_fallback" in load_options:
            load_options = {**load_options, "allow_fallback": True}
        source = records.get(needs or "torch")
        for batch in batches:
            row = {"backend": target, "batch_size": batch, "model": model_name,
                   "precision": (source or {}).get("record", {}).get("precision", "fp32")}
            reason = _bench_unavailable(target, runner_backend, source, _system())
            if reason:
                results.append({**row, "available": False, "reason": reason})
                continue
            progress(f"timing {target} at batch {batch}")
            job = {"runner_backend": runner_backend, "artifact": source.get("artifact"), "record": source["record"],
                   "batch": batch, "threads": threads, "warmup_iters": warmup_iters, "warmup_s": warmup_s,
                   "iters": iters, "budget_s": budget_s, "seed": seed, "load_options": load_options}
            measured = _run_worker(job, threads)
            if not measured.pop("ok"):
                results.append({**row, "available": False, "reason": measured["reason"]})
                continue
            results.append({**row, "available": True, "reason": None, "artifact_bytes": source.get("bytes"),
                            **measured})
    report = {"schema": reports.SCHEMA, "model": model_name, "label": label,
              "fingerprint": fingerprint.fingerprint(threads), "settings": settings, "results": results,
              "roofline": None}
    if roofline:
        from .roofline import attach_fractions, basis, cuda_gemm_rate, gemm_rate

        progress("measuring the GEMM roofline")
        report["roofline"] = {**gemm_rate(threads=threads), "model_gflop_per_image": gflops}
        if any(r.get("available") and basis(r.get("provider")) == "cuda" for r in results):
            report["roofline_cuda"] = cuda_gemm_rate()  # GPU rows are measured against the GPU's rate
        attach_fractions(report, gflops)
    report["files"] = reports.write_all(report, out / f"bench-{_safe(model_name)}")
    return report


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "model"


def _bench_sources(spec, targets, artifacts, out: Path, seed: int, progress: Progress):
    """What each target runs: artifacts given by the user, or exports made (and verified) now."""
    from .sources import load

    records: dict[str, dict] = {}
    for path in artifacts:
        record = sidecar.read(Path(path))
        records[record["backend"]] = {"artifact": str(path), "record": record, "bytes": _size(Path(path))}
        records.setdefault("torch", {"artifact": None, "record": {**record, "backend": "torch"}, "bytes": None})
    model_name, gflops = None, None
    if spec is not None:
        loaded = load(spec)
        model_name = spec.model
        gflops = loaded.config.gflops() if loaded.config else None
        records["torch"] = {"artifact": None, "bytes": None, "record": {
            "backend": "torch", "source": loaded.describe(), "input_names": ["pixel_values"],
            "output_names": ["logits"], "dynamic_batch": True, "precision": "fp32", "info": {}}}
        needed = {BENCH_TARGETS[t][2] for t in targets} - {None} - set(records)
        for backend in sorted(needed):
            if not backends.get(backend).availability().ok or _bench_unavailable(backend, backend, {}, _system()):
                continue
            progress(f"exporting {backend} (verified) for the benchmark")
            options = ExportOptions(dynamic_batch=backend != "coreml",
                                    precision="fp32", extra={"precision": "fp32"} if backend == "coreml" else {})
            result = export(backend, spec, options, out / "artifacts", seed=seed)
            records[backend] = {"artifact": result["artifact"], "record": sidecar.read(Path(result["artifact"])),
                                "bytes": _size(Path(result["artifact"]))}
    elif records:
        any_record = next(iter(records.values()))["record"]
        model_name = any_record["source"]["spec"]["model"]
        cfg = any_record["source"].get("config")
        if cfg:
            from .configs import ViTConfig

            gflops = ViTConfig.from_dict(cfg).gflops()
    else:
        raise UsageError("give --config/--model or artifact paths to benchmark")
    return records, model_name, gflops


def _system() -> str:
    import platform

    return platform.system()


def _bench_unavailable(target: str, runner_backend: str, source: dict | None, system: str) -> str | None:
    if target == "coreml" and system != "Darwin":
        return "Core ML runs only on macOS (the Linux evaluator checks numerics, it does not measure speed)"
    runs_here = getattr(backends.get(runner_backend), "runs_here", None)
    if runs_here is not None and not runs_here().ok:
        return runs_here().reason
    if source is None:
        availability = backends.get(runner_backend).availability()
        return availability.reason if not availability.ok else f"no {runner_backend} artifact to run"
    if target == "torch-cuda":
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device visible to torch"
    return None


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    extra = path.with_name(path.name + ".data")
    return path.stat().st_size + (extra.stat().st_size if extra.exists() else 0)


def _run_worker(job: dict, threads: int) -> dict:
    """Run one measurement in a fresh interpreter with the thread count fixed before any import."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "OPENBLAS_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-m", "vitexport.bench_worker"], input=json.dumps(job, default=str),
                          capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "reason": f"worker exited {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])
