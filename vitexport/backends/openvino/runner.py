"""Running an IR with openvino.Core on a device, with its precision pinned and read back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import Profiled, Runner, per_run, timed_runs
from vitexport.backends.openvino import devices
from vitexport.core.errors import BackendUnavailable, RuntimeFailure, explained

if TYPE_CHECKING:
    import numpy as np

    from vitexport.export.sidecar import ArtifactRecord


def device_for(record: "ArtifactRecord", requested: tuple[str, ...], allow_fallback: bool) -> str:
    """The device to run on: the first requested one (a bench target's, or --provider), else the one the
    IR was checked on at export. A requested device that is absent is refused unless the fallback to
    the CPU is allowed."""
    wanted = requested[0].upper() if requested else devices.recorded_device(record)
    why = devices.absent_reason(wanted)
    if why is None:
        return wanted
    if allow_fallback and requested:
        return "CPU"
    raise BackendUnavailable(why + ("; pass --allow-fallback to accept the CPU" if requested else ""))


class OpenVinoRunner(Runner):
    profiler = "openvino"

    def __init__(self, path: Path, record: "ArtifactRecord", providers: tuple[str, ...] = (),
                 threads: int | None = None, allow_fallback: bool = True):
        self.path, self.record, self.threads = path, record, threads
        self.requested, self.allow_fallback = tuple(providers), allow_fallback
        self.request, self.inputs = None, []

    def open(self) -> None:
        record = self.record
        device = device_for(record, self.requested, self.allow_fallback)
        # int8 IR's float part: the hint its export resolved and recorded, on whatever device it runs.
        pinned = devices.recorded_hint(record)
        needed = "bf16" if record.precision == "bf16" else pinned
        why = devices.hint_reason(needed, device) if needed else None
        if why:
            raise BackendUnavailable(why)
        core = devices.core()
        try:
            model = core.read_model(str(self.path))
            config = devices.compile_config(record.precision, device, self.threads, pinned)
            started = time.perf_counter()
            compiled = core.compile_model(model, device, config)
            self.compile_s = time.perf_counter() - started
        except Exception as e:
            raise RuntimeFailure(f"OpenVINO cannot load {self.path.name} on {device}: {explained(e)}") \
                from None
        computed = devices.ran(compiled)
        expected = record.precision if record.precision in ("fp32", "bf16") else devices.TYPE_NAMES.get(pinned)
        if expected and computed != expected:
            # The pin did not hold: numbers from here would be labelled with a precision that did not run.
            what = f"{record.precision} IR" if record.precision != "int8" else f"int8 IR's float part (pinned {pinned})"
            raise RuntimeFailure(f"OpenVINO's {device} computes this {what} in {computed}")
        self.computed = computed
        # int8 IR: the quantized ops in int8, the rest in what the device computed.
        label = f"int8+{computed}" if record.precision == "int8" else computed
        self.provider = f"openvino-{device}-{label}"
        self.inputs = [port.get_any_name() for port in compiled.inputs]
        self.outputs = {name: compiled.output(name) for name in record.output_names}
        self.request = compiled.create_infer_request()
        self.device, self.config = device, config

    def close(self) -> None:
        self.request = None

    def feed_of(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        return {name: np.ascontiguousarray(feed[name], dtype=np.float32) for name in self.inputs}

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        results = self.request.infer(self.feed_of(feed), share_outputs=False)
        return {name: np.asarray(results[port]) for name, port in self.outputs.items()}

    def profile(self, feed: dict[str, "np.ndarray"], runs: int, warmup: int) -> Profiled:
        """The IR compiled again as this one, with OpenVINO's performance counters on: each executed
        node's real time, per inference, by its node type in the compiled graph (what `benchmark_app -pc`
        shows)."""
        core = devices.core()
        try:
            compiled = core.compile_model(core.read_model(str(self.path)), self.device,
                                          {**self.config, "PERF_COUNT": True})
            request = compiled.create_infer_request()
            inputs = self.feed_of(feed)
            for _ in range(warmup):
                request.infer(inputs)
            events, run_ms = [], []
            for _ in range(runs):  # the counters hold the last inference only: read after each
                run_ms += timed_runs(lambda: request.infer(inputs), 1)
                events += [(p.node_name, p.node_type, p.real_time.total_seconds() * 1000.0)
                           for p in request.profiling_info if p.status == p.Status.EXECUTED]
        except Exception as e:
            raise RuntimeFailure(f"OpenVINO's performance counters failed: {explained(e)}") from None
        return Profiled(per_run(events, runs), run_ms)
