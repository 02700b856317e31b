"""Watching a Ray cluster while a matrix runs on it: is its head still there, and which nodes carry
which device.

Ray alone answers neither in time. A task that needs `device:NAME` stays pending for as long as no
node carries that resource, and the driver waits on it with no word; Ray marks a killed node dead
only after its health checks miss (about 15 s by default), and a driver that lost its head retries
for a minute and then exits from C++, with no line of ours. So two daemon threads look themselves:

- the head: a TCP connection to its GCS port every half second; refused twice in a row, or no answer
  for `HEAD_LOST_S`, and the head is lost (a stopped head refuses within a second; a lost network
  answers nothing);
- the nodes: Ray's node table (`ray.nodes()`) every second, and a TCP connection to the raylet of
  each node that carries a device (a killed raylet refuses at once, long before Ray's verdict).

Neither thread can be quick enough for Ray's object store: a `ray.put` or a `ray.get` of stored
bytes after this machine's node (its raylet) died ends the process at once, from C++, with no word.
So the pool calls `confirm()` just before each: it knocks now, on the head and on this machine's
raylet, and a run whose cluster is gone ends with our line instead.

`Placement` turns what they see into what the run does: say at once when no live node carries a
device a pending timing needs, wait up to `--node-wait` seconds for one to join, then give up on
those timings. It is plain bookkeeping over snapshots, so it is tested without a cluster.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

PERIOD_S = 1.0  # how often the node table is read
HEAD_PERIOD_S = 0.5  # how often the head is knocked on
PROBE_TIMEOUT_S = 1.0  # one TCP connection attempt
HEAD_LOST_S = 5.0  # no answer from the head for this long (a lost network): the head is lost
REMIND_S = 30.0  # while a device is missing, say so again this often


def clock() -> str:
    """The wall-clock time of day, as the lines that say when something happened show it."""
    return time.strftime("%H:%M:%S")


@dataclass(frozen=True)
class Node:
    id: str
    host: str
    port: int  # its raylet's
    resources: dict[str, float] = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return f"node {self.id[:8]} ({self.host})"

    @classmethod
    def from_ray(cls, entry: dict) -> "Node":
        return cls(entry["NodeID"], str(entry.get("NodeManagerAddress")), int(entry.get("NodeManagerPort") or 0),
                   dict(entry.get("Resources") or {}))


@dataclass(frozen=True)
class Left:
    node: Node
    at: str  # time of day it was seen leaving
    why: str


def knock(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when something accepts a TCP connection at host:port, else why not ("refused", ...)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "no answer"
    except OSError as e:
        return e.strerror or type(e).__name__


class Watch:
    """The two watching threads and what they saw; `start()` once connected, `stop()` at the end."""

    def __init__(self, nodes: Callable[[], list[dict]], head: tuple[str, int], *, period: float = PERIOD_S,
                 head_period: float = HEAD_PERIOD_S, head_lost_s: float = HEAD_LOST_S,
                 local: tuple[str, int] | None = None):
        self._read_nodes, self.head, self.local = nodes, head, local  # local: this machine's raylet
        self.period, self.head_period, self.head_lost_s = period, head_period, head_lost_s
        self.alive: dict[str, Node] = {}  # live nodes, as last seen
        self.left: dict[str, Left] = {}  # nodes seen leaving, by id
        self.head_lost: str | None = None  # what was seen, once the head is lost
        self.seen = threading.Event()  # set once the node table has been read
        self._answered: set[str] = set()  # device nodes whose raylet has answered a knock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._watch_head, name="vitexport-ray-head", daemon=True),
                         threading.Thread(target=self._watch_nodes, name="vitexport-ray-nodes", daemon=True)]

    def start(self) -> "Watch":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # the threads are daemons: one stuck in a call to a dead head does not hold the exit

    def confirm(self) -> str | None:
        """Knock now rather than at the next period: what was seen once the head or this machine's
        raylet refuses twice in a row (half a period apart), else None."""
        if self.head_lost:
            return self.head_lost
        places = [("its head", self.head)] + ([("this machine's Ray node", self.local)] if self.local else [])
        if all(knock(*where) != "refused" for _, where in places):
            return None
        time.sleep(self.head_period)  # a second refusal, as the head's thread asks, before giving up
        for who, (host, port) in places:
            if knock(host, port) == "refused":
                self.head_lost = f"{who} stopped answering at {clock()} ({host}:{port}: connections refused)"
                return self.head_lost
        return None

    def snapshot(self) -> tuple[dict[str, Node], dict[str, Left]]:
        with self._lock:
            return dict(self.alive), dict(self.left)

    # -- the threads -------------------------------------------------------------------------------------
    def _watch_head(self) -> None:
        host, port = self.head
        last_answer, refusals = time.monotonic(), 0
        while not self._stop.is_set():
            why = knock(host, port)
            now = time.monotonic()
            if why is None:
                last_answer, refusals = now, 0
            else:
                refusals = refusals + 1 if why == "refused" else 0
                if refusals >= 2 or now - last_answer >= self.head_lost_s:
                    what = "connections refused" if refusals >= 2 else f"{why} for {now - last_answer:.0f} s"
                    self.head_lost = f"its head stopped answering at {clock()} ({host}:{port}: {what})"
                    return
            self._stop.wait(self.head_period)

    def _watch_nodes(self) -> None:
        while not self._stop.is_set():
            if self.head_lost or knock(*self.head) is not None:  # Ray's node table would wait a minute for it
                self._stop.wait(self.period)
                continue
            try:
                table = self._read_nodes()
            except Exception:  # the head is going: the head's watch says so
                self._stop.wait(self.period)
                continue
            alive, left = {}, {}
            for entry in table:
                node = Node.from_ray(entry)
                if not entry.get("Alive"):
                    message = entry.get("DeathReasonMessage") or ""
                    left[node.id] = f"Ray marked it dead{': ' + message if message else ''}"
                    continue
                if any(k.startswith("device:") for k in node.resources):
                    answer = knock(node.host, node.port)
                    if answer is None:
                        self._answered.add(node.id)
                    elif answer == "refused" and node.id in self._answered:  # not a port this machine never reached
                        left[node.id] = "its raylet stopped answering"  # killed: long before Ray's health checks
                        continue
                alive[node.id] = node
            with self._lock:
                known = {**self.alive, **{i: entry.node for i, entry in self.left.items()}}
                self.alive = alive
                for node_id, why in left.items():
                    if node_id not in self.left:
                        node = known.get(node_id) or Node.from_ray(next(e for e in table if e["NodeID"] == node_id))
                        self.left[node_id] = Left(node, clock(), why)
            self.seen.set()
            self._stop.wait(self.period)


@dataclass
class Gone:
    since: float  # time.monotonic() when it was noticed
    text: str  # "no node carries device:NAME since node … left at …"
    said: float | None = None  # when it was last said


class Placement:
    """For each device the run times on: the nodes that can take its timings, and, when none is left,
    since when and for how long its pending timings may still wait."""

    def __init__(self, wait_s: float, cpus: dict[str, float], carriers: dict[str, Iterable[Node]]):
        self.wait_s, self.cpus = wait_s, cpus
        self.carriers = {device: {n.id: n for n in nodes} for device, nodes in carriers.items()}
        self.gone: dict[str, Gone] = {}

    def fits(self, node: Node, device: str) -> bool:
        """Whether a node can take the device's timings: it carries the device and the CPUs a timing
        takes (a node that joins with fewer would leave the timing pending for ever)."""
        return (node.resources.get(f"device:{device}", 0) >= 1
                and node.resources.get("CPU", 0) >= self.cpus.get(device, 0))

    def update(self, alive: dict[str, Node], left: dict[str, Left], needed: Iterable[str],
               now: float) -> tuple[list[str], set[str]]:
        """What to say now, and the devices whose pending timings have waited long enough."""
        notices, expired, needed = [], set(), set(needed)
        for device in self.carriers:
            current = {i: n for i, n in alive.items() if self.fits(n, device)}
            gone = self.gone.get(device)
            if current:
                if gone is not None:
                    del self.gone[device]
                    if gone.said is not None:
                        joined = ", ".join(n.name for i, n in current.items() if i not in self.carriers[device])
                        back = joined or "its node"
                        notices.append(f"device:{device} is back: {back} answers again; its timings go on")
                self.carriers[device] = current
                continue
            if gone is None:
                gone = self.gone[device] = Gone(now, self._since(device, left))
            if device not in needed:
                continue
            waited = now - gone.since
            if waited >= self.wait_s:
                expired.add(device)
            elif gone.said is None:
                notices.append(f"{gone.text}; waiting up to {self.wait_s:g} s for one to join (--node-wait)")
                gone.said = now
            elif now - gone.said >= REMIND_S:
                notices.append(f"{gone.text}; {self.wait_s - waited:.0f} s left for one to join (--node-wait)")
                gone.said = now
        return notices, expired

    def reason(self, device: str) -> str:
        """Why a timing that waited for the device in vain did not run."""
        return f"{self.gone[device].text}; none joined within {self.wait_s:g} s (--node-wait)"

    def _since(self, device: str, left: dict[str, Left]) -> str:
        gone = [left[i] for i in self.carriers.get(device, {}) if i in left]
        if not gone:
            return f"no live node carries device:{device} since {clock()}"
        last = gone[-1]
        return f"no node carries device:{device} since {last.node.name} left at {last.at} ({last.why})"
