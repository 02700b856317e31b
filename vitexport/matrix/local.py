"""Cells on this machine: a bounded pool of worker processes (`vitexport.matrix.worker`).

Exports run up to `workers` at a time. A timing runs alone: it starts only when no export is running
and none starts until it is done, so nothing else on this machine competes with what it measures
(the bench itself times each measurement in a fresh process of its own). Pending timings go before
pending exports, so cells finish, and report, as early as they can.
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

STOP_S = 30  # how long a worker gets to clean up after SIGTERM before it is killed


class Worker:
    def __init__(self, index: int, log: Path):
        from vitexport.matrix.worker import child_environment

        self.log = open(log, "w")  # a worker's stderr as it runs: a stream, not an output written whole
        self.proc = subprocess.Popen([sys.executable, "-m", "vitexport.matrix.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=child_environment())
        self.index, self.job = index, None  # job: (ticket, kind) while busy

    def send(self, ticket: Any, kind: str, job: dict) -> None:
        self.job = (ticket, kind)
        self.proc.stdin.write(json.dumps({"kind": kind, "job": job}, default=str) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict:
        line = self.proc.stdout.readline()
        self.job = None
        if line:
            return json.loads(line)
        code = self.proc.wait()
        return {"status": "error", "reason": f"the worker process ended (exit {code}); its log is {self.log.name}",
                "seconds": None}

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, now: bool) -> None:
        """Ask the worker to end: at once (SIGTERM: it cleans up and exits) or when idle (end of input)."""
        if now and self.alive and self.job is not None:
            self.proc.terminate()
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def wait(self) -> None:
        try:
            self.proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


class LocalPool:
    """Runs cells in worker processes on this machine, which is the device `device`."""

    def __init__(self, workers: int, device: str, out: Path):
        self.size, self.device = workers, device
        self.logs = Path(out) / "logs"
        self.workers: list[Worker] = []
        self.queued = {"export": deque(), "timing": deque()}
        self.started = 0

    # -- what the orchestrator calls -----------------------------------------------------------------
    def where(self) -> str:
        return "this machine"

    def devices(self, names: tuple[str, ...], threads: int | None) -> dict[str, dict]:
        """For each device: {"fingerprint"} where it can time here, else {"reason"}."""
        from vitexport.bench.fingerprint import fingerprint

        out = {}
        for name in names:
            if name == self.device:
                out[name] = {"fingerprint": fingerprint(threads), "nodes": ["local"]}
            else:
                out[name] = {"reason": f"device {name!r} is not this machine (this one is {self.device!r}: "
                                       f"--device names it); time it there, or with --ray on a cluster whose node "
                                       f"for it carries the resource device:{name}"}
        return out

    def submit(self, ticket: Any, kind: str, job: dict, **_) -> None:
        self.queued[kind].append((ticket, job))

    def collect(self, timeout: float) -> list[tuple[Any, dict]]:
        """Start what may start, then wait up to `timeout` s for results."""
        self._dispatch()
        busy = [w for w in self.workers if w.job is not None]
        if not busy:
            return []
        finished = []
        with selectors.DefaultSelector() as selector:
            for w in busy:
                selector.register(w.proc.stdout, selectors.EVENT_READ, w)
            for key, _ in selector.select(timeout):
                worker: Worker = key.data
                ticket = worker.job[0]
                result = worker.receive()
                result.setdefault("node", "local")
                finished.append((ticket, result))
        self._dispatch()
        return finished

    @property
    def busy(self) -> bool:
        return any(self.queued.values()) or any(w.job is not None for w in self.workers)

    def cancel(self, **_) -> str | None:
        """Stop the workers at once, mid-cell; say which work was stopped (None: none was)."""
        busy = [w.job[1] for w in self.workers if w.job is not None]
        self._stop(now=True)
        if not busy:
            return None
        counts = ", ".join(f"{busy.count(k)} {k}{'s' if busy.count(k) != 1 else ''}"
                           for k in ("export", "timing") if k in busy)
        return f"stopped {len(busy)} worker process{'es' if len(busy) != 1 else ''} mid-cell ({counts})"

    def close(self) -> None:
        """Let the workers end once idle (after `cancel`: they are already gone)."""
        self._stop(now=False)

    def _stop(self, now: bool) -> None:
        for w in self.workers:
            w.stop(now=now)
        for w in self.workers:
            w.wait()
        self.workers = []

    # -- scheduling ----------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        running = [w.job[1] for w in self.workers if w.job is not None]
        if "timing" in running:
            return
        if self.queued["timing"]:
            if not running:  # alone on the machine
                self._start(self._idle(), "timing")
            return  # exports wait until the timing is done
        while self.queued["export"] and len(running) < self.size:
            self._start(self._idle(), "export")
            running.append("export")

    def _idle(self) -> Worker:
        self.workers = [w for w in self.workers if w.alive or w.job is not None]
        for w in self.workers:
            if w.job is None:
                return w
        self.logs.mkdir(parents=True, exist_ok=True)
        self.started += 1
        worker = Worker(self.started, self.logs / f"worker-{self.started}.log")
        self.workers.append(worker)
        return worker

    def _start(self, worker: Worker, kind: str) -> None:
        ticket, job = self.queued[kind].popleft()
        worker.send(ticket, kind, job)
