"""Bench workers that answer the worker protocol in this process with made-up timings.

The orchestrator, the rounds, the comparisons and the reports run for real; only the timed runs are
invented: a fake machine whose speed changes in phases (counted in bursts, never in seconds) and
models whose run time a test chooses. No wall clock is involved, so the outcomes cannot depend on how
busy the machine running the tests is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

REFERENCE_MS = 0.2
GEMM_MS = {"numpy": 90.0, "onnxruntime": 110.0, "torch": 95.0, "openvino": 88.0, "torch-cuda": 2.0}


@dataclass
class Machine:
    """`phases`: (bursts, model slowdown, reference slowdown) in turn, the last one lasting for ever."""

    phases: list[tuple[int, float, float]] = field(default_factory=lambda: [(1, 1.0, 1.0)])
    bursts: int = 0

    def factors(self) -> tuple[float, float]:
        left = self.bursts
        for length, model, ref in self.phases:
            if left < length:
                return model, ref
            left -= length
        return self.phases[-1][1], self.phases[-1][2]


@dataclass
class Fake:
    """What the fake workers do: `model_ms(job, batch)` per run, the machine, what fails."""

    machine: Machine = field(default_factory=Machine)
    model_ms: Callable[[dict, int], float] = lambda job, batch: 10.0 * batch
    fail_open: Callable[[dict], dict | None] = lambda job: None  # -> {"reason", "kind"} to fail
    fail_burst: Callable[[dict, int, int], dict | None] = lambda job, batch, n: None
    # `bench --profile`: the profiler's answer for a row (runtime and operators), or a failure to return.
    profile: Callable[[dict, int], dict] = lambda job, batch: {
        "ok": True, "runtime": "torch", "run_ms": [11.0, 12.0],
        "ops": [["fc1", "aten::addmm", 6.0 * batch], ["ln", "aten::native_layer_norm", 1.0 * batch],
                ["odd", "aten::some_new_op", 0.5 * batch], ["fc2", "aten::addmm", 2.0 * batch]]}
    log: list[tuple] = field(default_factory=list)  # (op, worker id, batch) in order
    wire: list[tuple] = field(default_factory=list)  # ("send", op, worker id) and ("receive", worker id) in order
    workers: list = field(default_factory=list)


class FakeWorker:
    fake: Fake  # set by `install`

    def __init__(self, threads: int):
        self.threads, self.closed, self.job, self.bursts = threads, False, None, 0
        self.id = len(self.fake.workers)
        self.fake.workers.append(self)

    def ask(self, op: str, **f) -> dict:
        fake = self.fake
        fake.log.append((op, self.id, f.get("batch")))
        if self.closed:
            return {"ok": False, "kind": "failed", "reason": "worker already closed"}
        if op == "open":
            self.job = f
            failed = fake.fail_open(f) if f["kind"] == "model" else None
            if failed:
                return {"ok": False, **failed}
            provider = {"model": "CPUExecutionProvider" if f.get("backend") == "onnx" else "torch-cpu",
                        "reference": "numpy"}.get(f["kind"], f.get("library"))
            n = f.get("n", 256)
            return {"ok": True, "load_s": 0.1, "provider": provider, "threads_applied": {"threads": self.threads},
                    "flop": 2.0 * n ** 3 if f["kind"] != "model" else None, "what": f"fake {f['kind']}"}
        if op == "prepare":
            return {"ok": True, "first_inference_ms": 50.0, "warm_ms": 1.0}
        if op == "burst":
            batch = f.get("batch", 1)
            failed = fake.fail_burst(self.job, batch, self.bursts) if self.job["kind"] == "model" else None
            self.bursts += 1
            if failed:
                return {"ok": False, **failed}
            model, ref = fake.machine.factors()
            fake.machine.bursts += 1
            kind = self.job["kind"]
            if kind == "model":
                base = fake.model_ms(self.job, batch) * model
            elif kind == "reference":
                base = REFERENCE_MS * ref
            else:
                base = GEMM_MS[self.job["library"]] * model
            runs = f.get("runs") or 5
            # deterministic jitter: up to 2 % between bursts (varying with the burst and the worker), 1 % within
            base *= 1 + 0.02 * (((self.bursts * 5 + self.id * 3) % 7) - 3) / 3
            samples = [base * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(runs)]
            return {"ok": True, "samples_ms": samples, "rss_mb": 100.0 + batch}
        if op == "profile":
            reply = fake.profile(self.job, f.get("batch", 1))
            return {**reply, "runs": f["runs"]} if reply.get("ok") else reply
        if op == "close":
            self.closed = True
            return {"ok": True, "peak_rss_mb": 100.0, "peak_gpu_mb": None}
        return {"ok": False, "kind": "failed", "reason": f"unknown request {op!r}"}

    def send(self, op: str, **f) -> None:
        self.fake.wire.append(("send", op, self.id))
        self.pending = getattr(self, "pending", []) + [self.ask(op, **f)]

    def receive(self) -> dict:
        self.fake.wire.append(("receive", self.id))
        return self.pending.pop(0)

    def close(self) -> dict:
        return self.ask("close") if not self.closed else {"ok": False}

    def kill(self) -> None:
        self.closed = True


def install(monkeypatch, fake: Fake | None = None) -> Fake:
    """Replace bench's worker processes with fake ones for the test."""
    from vitexport.bench import session as benchsession

    fake = fake or Fake()
    worker = type("Worker", (FakeWorker,), {"fake": fake})
    monkeypatch.setattr(benchsession, "WorkerProcess", worker)
    return fake
