"""A benchmark worker: one persistent process that times one thing, in bursts, when told to.

`python -m vitexport.bench.worker` reads one JSON request per line on stdin and answers each with one
JSON line on stdout (`{"ok": true, ...}` or `{"ok": false, "reason": ..., "kind": "unavailable" |
"failed"}`). Requests, in order:
    {"op": "open", "kind": "model" | "gemm" | "reference", "threads": N, ...}  load it; load time, provider;
                                                                             a model: cold and warm load, its memory
                                                                             (vitexport.bench.loadcost)
    {"op": "prepare", "batch": B, "warmup_iters": I, "warmup_s": S}           first inference, warm-up
    {"op": "burst", "batch": B, "runs": N | "ms": T, "warmup_s": W}           timed runs -> samples_ms
    {"op": "profile", "batch": B, "runs": N, "warmup_runs": W}               after the timing: each operator's
                                                                             ms from the runtime's profiler
    {"op": "close"}                                                          peak memory, then exit

One process per measured thing keeps runtimes from sharing thread pools, allocators or caches (two
sessions in one process slow each other through their spinning pools), and lets the thread count be
fixed before torch or ONNX Runtime is imported. Staying alive between bursts lets two workers take
turns in short bursts, so what they measure is close in time (vitexport.bench.rounds).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

# Untimed runs at the start of every burst: while the other side ran, this process's caches went
# cold and its thread pool went to sleep (and the other side's may still be spinning down). Runs
# longer than LONG_RUN_MS are not repeated for it: the few cold milliseconds are lost in them.
BURST_WARMUP_RUNS = 1
BURST_WARMUP_S = 0.02
LONG_RUN_MS = 250.0


class ModelKernel:
    """An artifact (or the eager model) loaded by its backend, run on seeded random pixels."""

    def __init__(self, job: dict, threads: int):
        from vitexport import backends
        from vitexport.backends.base import RunOptions
        from vitexport.bench.measure import time_load
        from vitexport.export.sidecar import ArtifactRecord

        self.record = ArtifactRecord.from_dict(job["record"])
        backends.register(job["backend"], job["module"])  # a backend registered at run time too
        be = backends.get(job["backend"])
        run = RunOptions(**{**job["run"], "providers": tuple(job["run"]["providers"]), "threads": threads})
        self.seed, self.feeds = job["seed"], {}
        import numpy  # noqa: F401 (before the clock, as when torch brought it: load_s stays the runtime's own)

        if job.get("load_costs", True):
            from pathlib import Path

            from vitexport.bench.loadcost import artifact_files, load_costs

            artifact = job.get("artifact")
            files = artifact_files(Path(artifact), be.files(Path(artifact), self.record)) if artifact else []
            self.runner, self.costs = load_costs(lambda: be.load(artifact, self.record, run).__enter__(),
                                                 lambda r: r.__exit__(None, None, None), files)
            self.load_s = self.costs["load_warm_s"]
        else:
            self.runner, self.load_s = time_load(lambda: be.load(job.get("artifact"), self.record, run).__enter__())
            self.costs = {}
        self.provider = self.runner.provider

    def runner_for(self, batch: int) -> Callable[[], object]:
        feed = self.feed_for(batch)
        return lambda: self.runner.run(feed)

    def timed_inside(self, batch: int) -> Callable[..., list[float]] | None:
        """A runner that times its own runs where they happen (a page in a browser: `timed_burst`), or
        None: then the runs are timed here around `run`."""
        burst = getattr(self.runner, "timed_burst", None)
        return None if burst is None else (lambda **kw: burst(self.feed_for(batch), **kw))

    def feed_for(self, batch: int) -> dict:
        if batch not in self.feeds:
            from vitexport.verify.feeds import random_pixels

            pre = self.record.source.preprocessing
            x = random_pixels((batch, *self.record.source.input_shape[1:]), self.seed, pre.get("mean"), pre.get("std"))
            self.feeds[batch] = {self.record.input_names[0]: x}
        return self.feeds[batch]

    def profile(self, batch: int, runs: int, warmup: int) -> dict:
        """`bench --profile`: the runner's own profiler on the same feed, after the timing."""
        from vitexport.core.errors import BackendUnavailable

        if not callable(getattr(self.runner, "profile", None)):
            raise BackendUnavailable("this runtime has no per-operator profiler in vitexport")
        profiled = self.runner.profile(self.feed_for(batch), runs, warmup)
        return {"runtime": self.runner.profiler, "runs": runs, "run_ms": profiled.run_ms,
                "ops": [[op.name, op.op_type, op.ms] for op in profiled.ops]}

    def close(self) -> None:
        self.runner.__exit__(None, None, None)


class ProductKernel:
    """A matrix product of one library (the roofline's GEMM, or the small reference kernel)."""

    def __init__(self, job: dict, threads: int):
        from vitexport.bench import roofline

        t0 = time.perf_counter()
        if job["kind"] == "reference":
            self.run, self.flop, self.what = roofline.reference_kernel(threads)
        else:
            self.run, self.flop, self.what = roofline.gemm_kernel(job["library"], job["dtype"], job["n"], threads)
        self.load_s = time.perf_counter() - t0
        self.provider = job.get("library", "numpy")

    def runner_for(self, batch: int) -> Callable[[], object]:
        return self.run

    def close(self) -> None:
        self.run = None


class Worker:
    def __init__(self) -> None:
        self.kernel: Any = None
        self.threads = 1
        self.last_ms: dict[int, float] = {}  # batch -> a recent run's time

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"ok": False, "kind": "failed", "reason": f"unknown request {op!r}"}
        try:
            return {"ok": True, **handler(request)}
        except Exception as e:  # reported as an unavailable row, never a silent gap
            return failure(e)

    def op_open(self, r: dict) -> dict:
        from vitexport.bench.measure import apply_threads, torch_threads

        # First: before numpy, torch or ONNX Runtime load. Only processes that run torch import it (an
        # ONNX Runtime or OpenVINO row would pay over a second and its memory for nothing).
        applied = apply_threads(r["threads"], torch=runs_torch(r))
        self.threads = r["threads"]
        self.kernel = (ModelKernel if r["kind"] == "model" else ProductKernel)(r, self.threads)
        if "torch" in sys.modules and "torch" not in applied:  # a runner that imports torch without saying so
            applied.update(torch_threads(self.threads))
        return {"load_s": self.kernel.load_s, **getattr(self.kernel, "costs", {}),
                "provider": self.kernel.provider, "threads_applied": applied,
                "flop": getattr(self.kernel, "flop", None), "what": getattr(self.kernel, "what", None)}

    def op_prepare(self, r: dict) -> dict:
        from vitexport.bench.measure import first_inference_ms
        from vitexport.core.timing import measure

        inside = getattr(self.kernel, "timed_inside", lambda batch: None)(r.get("batch", 1))
        if inside is not None:
            first = inside(runs=1)[0]
            warm_ms = inside(runs=1, warmup_runs=r.get("warmup_iters", 0), warmup_s=r.get("warmup_s", 0.0))[0]
            self.last_ms[r.get("batch", 1)] = warm_ms
            return {"first_inference_ms": first, "warm_ms": warm_ms}
        run = self.kernel.runner_for(r.get("batch", 1))
        first = first_inference_ms(run)
        warm = measure(run, batch_size=1, warmup_iters=r.get("warmup_iters", 0), warmup_s=r.get("warmup_s", 0.0),
                       iters=1)
        self.last_ms[r.get("batch", 1)] = warm.samples_ms[0]
        return {"first_inference_ms": first, "warm_ms": warm.samples_ms[0]}

    def op_burst(self, r: dict) -> dict:
        from vitexport.bench.measure import current_rss_mb
        from vitexport.core.timing import MAX_ITERS, measure

        batch = r.get("batch", 1)
        run = self.kernel.runner_for(batch)
        runs, ms = r.get("runs"), r.get("ms")
        short = self.last_ms.get(batch, 0.0) < LONG_RUN_MS
        warm_runs = r.get("warmup_runs", BURST_WARMUP_RUNS if short else 0)
        warm_s = r.get("warmup_s", BURST_WARMUP_S if short else 0.0)
        inside = getattr(self.kernel, "timed_inside", lambda batch: None)(batch)
        if inside is not None:
            samples = inside(runs=runs, ms=None if runs else ms, warmup_runs=warm_runs, warmup_s=warm_s,
                             max_runs=r.get("max_runs", MAX_ITERS))
            self.last_ms[batch] = sorted(samples)[len(samples) // 2]
            return {"samples_ms": samples, "rss_mb": current_rss_mb()}
        stats = measure(run, batch_size=1, warmup_iters=warm_runs, warmup_s=warm_s, iters=runs,
                        budget_s=None if runs else ms / 1000.0, min_iters=1, max_iters=r.get("max_runs", MAX_ITERS))
        self.last_ms[batch] = stats.p50
        return {"samples_ms": stats.samples_ms, "rss_mb": current_rss_mb()}

    def op_profile(self, r: dict) -> dict:
        from vitexport.core.errors import BackendUnavailable

        if not hasattr(self.kernel, "profile"):
            raise BackendUnavailable("only a model's rows have operators to profile")
        return self.kernel.profile(r.get("batch", 1), r["runs"], r.get("warmup_runs", 0))

    def op_close(self, r: dict) -> dict:
        from vitexport.bench.measure import peak_gpu_mb, peak_rss_mb

        if self.kernel is not None:
            self.kernel.close()
        return {"peak_rss_mb": peak_rss_mb(), "peak_gpu_mb": peak_gpu_mb()}


def runs_torch(job: dict) -> bool:
    """Whether the kernel of an open request runs in torch. A backend's package is light (no numpy,
    no torch), so asking it comes before the thread count is fixed."""
    if job["kind"] != "model":
        return job.get("library", "").startswith("torch")
    from vitexport import backends
    from vitexport.backends.base import RunOptions

    backends.register(job["backend"], job["module"])  # a backend registered at run time too
    run = RunOptions(**{**job["run"], "providers": tuple(job["run"]["providers"])})
    return backends.get(job["backend"]).runs_torch_for(run)


def failure(e: BaseException) -> dict:
    from vitexport.core.errors import BackendUnavailable, VitexportError, explained

    text = explained(e, default="")
    kind = "unavailable" if isinstance(e, BackendUnavailable) else "failed"
    reason = text if isinstance(e, VitexportError) else f"{type(e).__name__}: {text}"
    return {"ok": False, "kind": kind, "reason": reason}


def protocol_stream():
    """The replies' own copy of stdout; file descriptor 1 then points at stderr, so what libraries
    print (C++ loggers write to fd 1) can never break a reply."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return out


def main() -> None:
    replies = protocol_stream()
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as e:
            request, reply = {}, {"ok": False, "kind": "failed", "reason": f"bad request: {e}"}
        else:
            reply = worker.handle(request)
        replies.write(json.dumps(reply, default=str) + "\n")
        if request.get("op") == "close":
            break


if __name__ == "__main__":
    main()
