"""`bench --profile` for ExecuTorch: the program loaded again with ETDump on (its devtools' event
tracer), and the Inspector's events read back as each operator's time per inference: portable kernels
by operator name, XNNPACK's operators by the name the delegate gives them where its build records
them, else the whole delegate call as one."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from vitexport.backends.base import OpTime, Profiled, per_run, timed_runs
from vitexport.core.errors import BackendUnavailable, RuntimeFailure, explained

FRAMEWORK = {"Method::init", "Program::load_method", "Method::execute", "OPERATOR_CALL"}  # wrappers, not work
NATIVE = "native_call_"  # a portable kernel's event: native_call_<operator>


def profile_program(path: Path, inputs: list, runs: int, warmup: int) -> Profiled:
    """Load the program at `path` with ETDump, run `inputs` warmup + runs times, and read the trace back."""
    from vitexport.backends.executorch.libs import import_runtime, silenced_stderr

    runtime = import_runtime()
    try:
        from executorch.devtools import Inspector
    except ImportError:
        raise BackendUnavailable("ExecuTorch's devtools (executorch.devtools) are not installed here") from None
    try:
        program = runtime.load_program(str(path), enable_etdump=True, debug_buffer_size=0)
        with silenced_stderr():
            method = program.load_method("forward")
        run_ms = timed_runs(lambda: method.execute(inputs), warmup + runs)
        with tempfile.TemporaryDirectory(prefix="vitexport-etdump-") as folder:
            etdump = Path(folder) / "run.etdp"
            program.write_etdump_result_to_file(str(etdump), str(Path(folder) / "debug.bin"))
            inspector = Inspector(etdump_path=str(etdump))
            events = [(e.name, e.perf_data.raw, bool(e.is_delegated_op)) for block in inspector.event_blocks
                      for e in block.events if e.perf_data is not None]
    except (RuntimeError, ValueError, OSError) as e:
        raise RuntimeFailure(f"ExecuTorch's ETDump profile failed: {explained(e)}") \
            from None
    return Profiled(operator_times(events, runs), run_ms[warmup:])


def operator_times(events: list[tuple[str, list[float], bool]], runs: int) -> list[OpTime]:
    """Each operator's mean ms over the last `runs` runs of its raw times; a DELEGATE_CALL only where
    the delegate recorded no operators of its own (else it would count them twice)."""
    delegated = any(is_delegated for _, _, is_delegated in events)
    kept = []
    for index, (name, raw, _) in enumerate(events):
        if name in FRAMEWORK or (delegated and name == "DELEGATE_CALL") or not raw:
            continue
        # XNNPACK numbers its operators ("Fully Connected (NC, F32) GEMM #2"): the type is the name without it.
        op_type = re.sub(r"\s+#\d+$", "", name[len(NATIVE):] if name.startswith(NATIVE) else name)
        last = raw[-runs:]
        kept.append((f"{index}:{name}", op_type, sum(last) * runs / len(last)))
    return per_run(kept, runs)
