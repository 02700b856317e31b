"""`bench --profile` for ONNX Runtime: a second session with its profiler on, and its JSON trace read
back as each node's time per inference (node events by op type)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from vitexport.backends.base import OpTime, Profiled, per_run, timed_runs
from vitexport.core.errors import RuntimeFailure, explained

KERNEL = "_kernel_time"  # ORT names a node's compute event "<node>_kernel_time" (fences have other suffixes)


def profile_session(path: Path, session_options: Any, providers: list, feed: dict, runs: int,
                    warmup: int) -> Profiled:
    """Run `feed` through a profiling session of the model at `path`; its trace file never outlives this."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="vitexport-ort-profile-") as folder:
        session_options.enable_profiling = True
        session_options.profile_file_prefix = str(Path(folder) / "trace")
        try:
            session = ort.InferenceSession(str(path), session_options, providers=providers)
            # The trace starts with the session: the warm-up runs are in it, and cut out below.
            run_ms = timed_runs(lambda: session.run(None, feed), warmup + runs)
            trace = Path(session.end_profiling())
            events = json.loads(trace.read_text())
        except Exception as e:
            raise RuntimeFailure(f"ONNX Runtime's profiler failed: {explained(e)}") \
                from None
    return Profiled(node_times(events, skip=warmup, runs=runs), run_ms[warmup:])


def node_times(events: list[dict], skip: int, runs: int) -> list[OpTime]:
    """Each node's mean ms per inference over the runs after the first `skip` (`model_run` events mark
    where each run starts)."""
    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(starts) < skip + runs:
        raise RuntimeFailure(f"ONNX Runtime's trace holds {len(starts)} runs, {skip + runs} were made")
    after = starts[skip]
    kept = ((e["name"][:-len(KERNEL)], (e.get("args") or {}).get("op_name") or "unknown", e["dur"] / 1000.0)
            for e in events if e.get("cat") == "Node" and e.get("name", "").endswith(KERNEL) and e["ts"] >= after)
    return per_run(kept, runs)


def profiled_load(create: Any, session_options: Any) -> tuple[Any, float | None]:
    """A session created by `create(session_options)` with the profiler on for its creation alone, and
    the seconds ONNX Runtime spent initialising it (graph optimisation, kernels, weight packing):
    its trace's `session_initialization` event. None when the trace holds none."""
    with tempfile.TemporaryDirectory(prefix="vitexport-ort-load-") as folder:
        session_options.enable_profiling = True
        session_options.profile_file_prefix = str(Path(folder) / "load")
        session = create(session_options)
        trace = Path(session.end_profiling())  # off again: the runs that follow are not traced
        try:
            events = json.loads(trace.read_text())
        except (OSError, ValueError):
            return session, None
    seconds = [e["dur"] / 1e6 for e in events
               if e.get("cat") == "Session" and e.get("name") == "session_initialization"]
    return session, (seconds[0] if seconds else None)
