"""Short alternating rounds: persistent workers take turns in bursts, so everything a benchmark
compares is measured close in time.

Every round, each cell (one row: a worker at one batch size) runs one burst of timed runs while every
other worker waits; the order is shuffled every round, and the two sides of an A/B pair always run
back to back, in random order. A small reference kernel runs between them (the machine's state,
vitexport.bench.conditions), and the roofline's GEMM libraries take turns at the end of rounds. On a
machine whose speed changes in phases of seconds, two cells then see the same phases, and a phase
that starts between the two halves of a pair hits either side alike.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

from vitexport.bench.conditions import RoundClock
from vitexport.bench.stats import median
from vitexport.core.roundstats import slower
from vitexport.core.progress import Progress

REFERENCE_MS = 15  # one reference burst: ~50 products of 0.3 ms on two cores, their median kept


_slower = slower  # a round's reference: the slower reading either side of it


class WorkerProcess:
    """A `vitexport.bench.worker` process: one JSON request at a time, one JSON reply."""

    def __init__(self, threads: int):
        from vitexport.bench.measure import thread_env

        self.log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty library can never block it
        self.proc = subprocess.Popen([sys.executable, "-m", "vitexport.bench.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
                                     env={**os.environ, **thread_env(threads)})
        self.closed = False

    def ask(self, op: str, **fields: Any) -> dict:
        self.send(op, **fields)
        return self.receive()

    def send(self, op: str, **fields: Any) -> None:
        """A request, without waiting for its reply (`receive`): workers asked in turn work at once."""
        if self.closed:
            return
        try:
            self.proc.stdin.write(json.dumps({"op": op, **fields}, default=str) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker is gone: receive() says why

    def receive(self) -> dict:
        if self.closed:
            return {"ok": False, "kind": "failed", "reason": "worker already closed"}
        try:
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            return {"ok": False, "kind": "failed", "reason": self._died()}
        return json.loads(line)

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        self.closed = True
        if self.log.closed:
            return f"worker exited {code}"
        self.log.seek(0)
        lines = [line for line in self.log.read().strip().splitlines() if line.strip()]
        return f"worker exited {code}: {(lines or ['no output'])[-1][:200]}"

    def close(self) -> dict:
        """Ask for the final numbers (peak memory) and let the process end."""
        if self.closed:
            return {"ok": False, "reason": "closed"}
        reply = self.ask("close")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.kill()  # gone already, or stuck: either way nothing of it stays
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.closed = True
        if not self.log.closed:
            self.log.close()


@dataclass(eq=False)
class Cell:
    """One row being timed: a worker at one batch size, and what its bursts measured."""

    name: str
    worker: Any
    batch: int
    pair: int | None = None  # cells sharing a pair id run back to back, in random order
    samples: list[float] = field(default_factory=list)  # every timed run, ms
    medians: list[float] = field(default_factory=list)  # one per round it ran in
    references: list[float | None] = field(default_factory=list)  # that round's reference kernel, ms
    rss_mb: float | None = None  # the worker's resident memory after its last burst
    first_inference_ms: float | None = None
    failure: dict | None = None  # {"reason", "kind"} once a burst failed: not run again
    retired: str | None = None  # why it stopped taking turns early: clearly slower than the fastest

    def recent(self, rounds: int) -> list[float]:
        return self.medians[-rounds:]


@dataclass(eq=False)
class Probe:
    """A kernel timed between the cells: the reference kernel, or one library's GEMM."""

    name: str
    worker: Any
    request: dict
    flop: float = 0.0
    samples: list[float] = field(default_factory=list)
    bursts: int = 0
    failure: str | None = None

    def burst(self) -> float | None:
        """One burst; the median of its runs in ms, or None when it failed (then it is not run again)."""
        if self.failure:
            return None
        reply = self.worker.ask("burst", **self.request)
        if not reply.get("ok"):
            self.failure = reply.get("reason") or "failed"
            return None
        self.samples += reply["samples_ms"]
        self.bursts += 1
        return median(reply["samples_ms"])


class Rounds:
    """Runs rounds over cells; keeps what each round saw of the machine (`states`)."""

    def __init__(self, burst: dict, *, reference: Probe | None = None, gemms: list[Probe] = (), seed: int = 0,
                 progress: Progress | None = None, gemm_bursts: int = 3):
        self.burst, self.reference, self.gemms = burst, reference, list(gemms)
        self.rng = random.Random(seed)
        self.progress = progress
        self.gemm_bursts = gemm_bursts
        self.states: list[dict] = []

    def run(self, cells: list[Cell], count: int, burst: dict | None = None, label: str = "round",
            gemm_slots: int | None = None, retire: Callable[[list[Cell]], None] | None = None) -> None:
        """`count` rounds over the cells that have not failed (nor been retired); `burst` overrides the
        burst request. The GEMM libraries' bursts are spread over the rounds (`gemm_slots` per round at
        most). `retire(cells)` runs after each round and may retire the cells that cannot win."""
        per_round = -(-len(self.gemms) * self.gemm_bursts // max(count, 1)) if self.gemms else 0
        if gemm_slots is not None:
            per_round = min(per_round, gemm_slots)
        for r in range(count):
            live = [c for c in cells if c.failure is None and c.retired is None]
            if not live:
                break
            if self.progress:
                self.progress.note(f"{label} {r + 1}/{count}")
            self.one(live, burst or self.burst, gemm_slots=per_round)
            if retire is not None:
                retire([c for c in live if c.failure is None])
            if self.progress:
                self.progress.advance()

    def one(self, cells: list[Cell], burst: dict, gemm_slots: int = 0) -> dict:
        """One round: the groups (a pair, or one cell) in shuffled order, the reference kernel before
        each group and after the last, so every burst has a reading of the machine on either side of it
        (a cell's reference for the round is the slower of the two)."""
        clock = RoundClock()
        groups: dict[Any, list[Cell]] = {}
        for cell in cells:  # a pair is one group; every other cell its own
            groups.setdefault(("pair", cell.pair) if cell.pair is not None else ("cell", id(cell)), []).append(cell)
        order = list(groups.values())
        self.rng.shuffle(order)
        refs = [self._reference()]
        for group in order:
            self.rng.shuffle(group)
            ran = [cell for cell in group if self._burst(cell, burst)]
            refs.append(self._reference())
            for cell in ran:
                cell.references.append(_slower(refs[-2], refs[-1]))
        for probe in self._gemm_turns(gemm_slots):
            probe.burst()
        known = [r for r in refs if r is not None]
        state = clock.finish(max(known) if known else None)
        state["reference_each_ms"] = refs
        self.states.append(state)
        return state

    def _reference(self) -> float | None:
        return self.reference.burst() if self.reference else None

    def _burst(self, cell: Cell, burst: dict) -> bool:
        reply = cell.worker.ask("burst", batch=cell.batch, **burst)
        if not reply.get("ok"):
            cell.failure = {"reason": reply.get("reason") or "unknown", "kind": reply.get("kind", "failed")}
            return False
        cell.samples += reply["samples_ms"]
        cell.medians.append(median(reply["samples_ms"]))
        cell.rss_mb = reply.get("rss_mb")
        return True

    def _gemm_turns(self, slots: int) -> list[Probe]:
        """The libraries whose turn it is: the fewest bursts so far first, until each has its share."""
        waiting = sorted((p for p in self.gemms if not p.failure and p.bursts < self.gemm_bursts),
                         key=lambda p: p.bursts)
        return waiting[:slots]

    def top_up(self, probes: list[Probe] | None = None, bursts: int | None = None) -> None:
        """Bring every GEMM probe (or those given) to its share of bursts, or `bursts` more."""
        for probe in probes if probes is not None else self.gemms:
            target = probe.bursts + bursts if bursts else self.gemm_bursts
            while not probe.failure and probe.bursts < target:
                probe.burst()
