"""One benchmark measurement in a fresh process: `python -m vitexport.bench_worker < job.json`.

A fresh process per backend keeps runtimes from sharing thread pools, allocators or caches, and lets
the thread count be fixed through the environment before torch or ONNX Runtime is imported.
"""

from __future__ import annotations

import json
import sys
import time


def run(job: dict) -> dict:
    import numpy as np

    from . import backends, sidecar
    from .bench import measure, peak_gpu_mb, peak_rss_mb
    from .inputs import random_pixels

    threads = job["threads"]
    import torch

    torch.set_num_threads(threads)
    record = sidecar.read(job["artifact"]) if job.get("artifact") else job["record"]
    be = backends.get(job["runner_backend"])
    options = {"threads": threads, **job.get("load_options", {})}
    shape = record["source"]["input_shape"]
    pre = record["source"]["preprocessing"]
    x = random_pixels((job["batch"], *shape[1:]), job["seed"], pre.get("mean"), pre.get("std"))
    feed = {record["input_names"][0]: x}
    t0 = time.perf_counter()
    runner = be.load(job.get("artifact"), record, **options).__enter__()
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner.run(feed)
    first_ms = (time.perf_counter() - t0) * 1000.0
    stats = measure(lambda: runner.run(feed), batch_size=job["batch"], warmup_iters=job["warmup_iters"],
                    warmup_s=job["warmup_s"], iters=job.get("iters"), budget_s=job.get("budget_s"))
    provider = runner.provider
    runner.__exit__(None, None, None)
    return {**stats.to_dict(), "provider": provider, "load_s": load_s, "first_inference_ms": first_ms,
            "peak_rss_mb": peak_rss_mb(), "peak_gpu_mb": peak_gpu_mb(),
            "threads_applied": {"torch": torch.get_num_threads()}, "dtype": str(np.float32.__name__)}


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
