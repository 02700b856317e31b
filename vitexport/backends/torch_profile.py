"""`bench --profile` for the runtimes that run in torch (eager and TorchScript): PyTorch's profiler
around the runs, each operator's self time per inference (key_averages by op name). Self time, so a
composite operator (aten::linear) and the kernels it calls (aten::addmm) are never counted twice.
"""

from __future__ import annotations

from typing import Callable

from vitexport.backends.base import Profiled, per_run, timed_runs


def torch_profile(run: Callable[[], object], runs: int, warmup: int, device: str = "cpu") -> Profiled:
    """Profile `runs` calls of `run` after `warmup` unprofiled ones; on a GPU (written, not run where
    none is), operators' device time rather than the host's."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        run()
    gpu = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as prof:
        run_ms = timed_runs(run, runs)
    events = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", 0) if gpu else e.self_cpu_time_total
        if us > 0:
            events.append((e.key, e.key, us / 1000.0))
    return Profiled(per_run(events, runs), run_ms)
