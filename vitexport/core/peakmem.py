"""Resident memory of a process tree: what it holds now, and the peak of a stretch of work.

Pure standard library, Linux's /proc: the export pipeline records each stage's peak in the sidecar,
and the benchmark script measures whole commands with the same code. Elsewhere (macOS, Windows)
every figure is None: the stage is still timed, its memory is not guessed.

The peak of the process itself is exact: the kernel keeps it (VmHWM), and writing 5 to
/proc/self/clear_refs starts it again at the current size. The processes it starts (a converter run
in a helper process) have no such counter that can be read after they end, so they are sampled: the
tree's sum every `interval` seconds, which can miss a spike shorter than that. The sum counts each
page once (proportional set sizes): a forked child shares its parent's pages until it execs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
INTERVAL = 0.1  # seconds between samples of the tree: short beside a stage of a big model (seconds)


@dataclass(frozen=True)
class Resident:
    """One process's resident memory in bytes: anonymous (what it owns) and file-backed (mapped files,
    shared libraries: pages the kernel can drop and read again)."""

    anon: int
    file: int

    @property
    def total(self) -> int:
        return self.anon + self.file


def _kb_fields(path) -> dict[str, int] | None:
    """The `Name:  N kB` lines of a /proc file, in bytes; None where it cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[key] = int(parts[0]) * 1024
    return fields


def status_fields(pid: int | str = "self") -> dict[str, int] | None:
    """The kB fields of /proc/PID/status (VmRSS, VmHWM, RssAnon, RssFile, RssShmem) in bytes; None where
    there is no /proc or the process is gone."""
    return _kb_fields(PROC / str(pid) / "status")


def resident(pid: int | str = "self") -> Resident | None:
    """What `pid` holds in memory now; None where it cannot be read."""
    f = status_fields(pid)
    if not f or "RssAnon" not in f:
        return None
    return Resident(anon=f["RssAnon"], file=f.get("RssFile", 0) + f.get("RssShmem", 0))


def children(pid: int) -> list[int]:
    """The direct children of `pid`, from each of its threads' children list (cheap: no scan of /proc);
    a kernel without those lists falls back to reading every process's parent."""
    tasks = PROC / str(pid) / "task"
    try:
        names = os.listdir(tasks)
    except OSError:
        return []
    kids, listed = [], False
    for tid in names:
        try:
            kids += [int(k) for k in (tasks / tid / "children").read_text().split()]
            listed = True
        except OSError:
            continue
    return kids if listed else _children_by_scan(pid)


def _children_by_scan(pid: int) -> list[int]:
    found = []
    try:
        entries = [e for e in os.listdir(PROC) if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = (PROC / entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, the last ')' ends it
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    """Every living process below `pid` (children, their children, ...)."""
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def proportional(pid: int | str = "self") -> Resident | None:
    """`pid`'s proportional set size in bytes (each page it shares with other processes counted as its
    share), anonymous and file-backed: what summing over processes needs, where a forked child still
    shares its parent's pages."""
    fields = _kb_fields(PROC / str(pid) / "smaps_rollup")
    if fields is None or "Pss" not in fields:
        return None
    anon = fields.get("Pss_Anon", 0)
    return Resident(anon=anon, file=fields["Pss"] - anon)


def tree_resident(pid: int) -> Resident:
    """The resident memory of `pid` and every process below it, each page counted once.

    Summing each process's RSS would count a page two processes share twice: a child forked by a
    5 GB process (to run a tool) shows 5 GB of RSS until it execs, though it adds nothing. So alone,
    a process counts its RSS; with others, each counts its proportional share (PSS), which sums to
    the pages they hold once."""
    family = [pid, *descendants(pid)]
    if len(family) == 1:
        return resident(pid) or Resident(0, 0)
    shares = [r for r in (proportional(p) for p in family) if r is not None]
    return Resident(anon=sum(r.anon for r in shares), file=sum(r.file for r in shares))


_ACTIVE: list["TreePeak"] = []  # this process's open measurements, outermost first


def reset_peak() -> bool:
    """Start this process's peak (VmHWM) again at its present size; False where the kernel does not allow it.
    The peak so far is handed to every open measurement first, so a stage inside a stage keeps the
    outer one's peak whole."""
    hwm = (status_fields() or {}).get("VmHWM", 0)
    for peak in _ACTIVE:
        peak.sampled = max(peak.sampled, hwm)
    try:
        with open(PROC / "self" / "clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class TreePeak:
    """The peak resident memory of a process tree over a stretch of work, in bytes:
    `with TreePeak(pid) as peak: ...; peak.bytes`. For this process (the default) its exact peak and
    its helpers' sampled sum; for another pid (a command the benchmark started), the sampled sum."""

    def __init__(self, pid: int | None = None, interval: float = INTERVAL):
        self.pid, self.interval = pid, interval
        self.own = pid is None or pid == os.getpid()
        self.sampled, self.exact = 0, False
        self.when: float | None = None  # seconds from the start to the sampled peak
        self.anon = 0  # the sampled peak of anonymous memory alone (what cannot be dropped and read again)
        self.bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "TreePeak":
        if not (PROC / "self" / "status").exists():
            return self
        self.exact = self.own and reset_peak()
        if self.own:
            _ACTIVE.append(self)
        self._thread = threading.Thread(target=self._sample, name="vitexport-peakmem", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        pid = os.getpid() if self.own else self.pid
        t0 = time.perf_counter()
        while True:
            now = tree_resident(pid)
            if now.total > self.sampled:
                self.sampled, self.when = now.total, time.perf_counter() - t0
            self.anon = max(self.anon, now.anon)
            if self._stop.wait(self.interval):
                return

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.bytes = self.sampled
        if self.own and self.exact:
            # The exact peak of this process, plus what its helpers held at the sampled peak's moment
            # at most: never below the sampled sum.
            hwm = (status_fields() or {}).get("VmHWM", 0)
            self.bytes = max(self.sampled, hwm)


class Stage:
    """One stage's wall time and peak memory: `with Stage() as s: ...; s.record()`."""

    def __init__(self) -> None:
        self.peak = TreePeak()
        self.seconds = 0.0

    def __enter__(self) -> "Stage":
        self.peak.__enter__()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.peak.__exit__(*exc)

    def record(self) -> dict[str, float | None]:
        """What the sidecar records of the stage: seconds, and the peak in MB (None where not measured)."""
        mb = None if self.peak.bytes is None else round(self.peak.bytes / 1e6, 1)
        return {"seconds": round(self.seconds, 3), "peak_rss_mb": mb}


def merged(old: dict | None, new: dict) -> dict:
    """A stage run again (an export retried): the times add up, the peak is the higher one."""
    if old is None:
        return new
    peaks = [p for p in (old["peak_rss_mb"], new["peak_rss_mb"]) if p is not None]
    return {"seconds": round(old["seconds"] + new["seconds"], 3), "peak_rss_mb": max(peaks) if peaks else None}


def trim_heap() -> bool:
    """Return the C heap's free memory to the system (glibc's malloc_trim): memory a library freed stays
    resident otherwise, to be reused by the process but counted, and unavailable to others. False where
    there is no such call."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False
