"""One benchmark measurement in a fresh process: `python -m vitexport.bench_worker < job.json`.

A fresh process per backend keeps runtimes from sharing thread pools, allocators or caches, and lets
the thread count be fixed before torch or ONNX Runtime is imported. The protocol is described in
vitexport.benchrun.
"""

from __future__ import annotations

import json
import sys


def run(job: dict) -> dict:
    from .bench import apply_threads

    threads = apply_threads(job["threads"])  # first: before numpy, torch or ONNX Runtime load

    from . import backends
    from .backends.base import RunOptions
    from .bench import first_inference_ms, measure, peak_gpu_mb, peak_rss_mb, time_load
    from .inputs import random_pixels
    from .sidecar import ArtifactRecord

    record = ArtifactRecord.from_dict(job["record"])
    backends.register(job["backend"], job["module"])  # a backend registered at run time, not only built-in ones
    be = backends.get(job["backend"])
    run_options = RunOptions(**{**job["run"], "providers": tuple(job["run"]["providers"]),
                                "threads": job["threads"]})
    pre = record.source.preprocessing
    x = random_pixels((job["batch"], *record.source.input_shape[1:]), job["seed"], pre.get("mean"), pre.get("std"))
    feed = {record.input_names[0]: x}
    runner, load_s = time_load(lambda: be.load(job.get("artifact"), record, run_options).__enter__())
    try:
        first_ms = first_inference_ms(lambda: runner.run(feed))
        stats = measure(lambda: runner.run(feed), batch_size=job["batch"], warmup_iters=job["warmup_iters"],
                        warmup_s=job["warmup_s"], iters=job.get("iters"), budget_s=job.get("budget_s"))
        provider = runner.provider
    finally:
        runner.__exit__(None, None, None)
    samples = {"samples_ms": stats.samples_ms} if job.get("samples") else {}
    return {**stats.to_dict(), **samples, "provider": provider, "load_s": load_s, "first_inference_ms": first_ms,
            "peak_rss_mb": peak_rss_mb(), "peak_gpu_mb": peak_gpu_mb(), "threads_applied": threads,
            "dtype": "float32"}


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        result = {"ok": True, **run(job)}
    except Exception as e:  # reported as an unavailable row, never a silent gap
        from .errors import VitexportError

        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        result = {"ok": False, "reason": text if isinstance(e, VitexportError) else f"{type(e).__name__}: {text}"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
