"""Where the suite's time goes: every test's setup, call and teardown summed per folder and per file,
printed at the end of every run (CI's included) beside pytest's own `--durations` list.

Information, never a gate: nothing here fails a run. Under pytest-xdist the controller receives
every worker's reports, so the sums cover the whole run; they add the workers' time, which is
larger than the wall time when two workers run side by side.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import PurePosixPath

NO_BACKEND = "(none named)"


class Durations:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)  # nodeid -> setup + call + teardown

    def add(self, nodeid: str, seconds: float) -> None:
        self.seconds[nodeid] += seconds

    def totals(self, depth: str) -> list[tuple[str, int, float]]:
        """(folder or file, tests, seconds), the largest first; depth is "folder" or "file"."""
        def place(nodeid: str) -> str:
            path = PurePosixPath(nodeid.split("::")[0])
            return str(path.parent if depth == "folder" else path)

        return self._summed(place)

    def by_backend(self, names: list[str]) -> list[tuple[str, int, float]]:
        """(backend, tests, seconds), the largest first: a test counts for the backend its parameters
        name, else its file, else its function (`test_x[executorch-ViT]`, `test_executorch.py`); the
        first named where a part names several."""
        return self._summed(lambda nodeid: _backend_named(nodeid, names))

    def _summed(self, key) -> list[tuple[str, int, float]]:
        count: dict[str, int] = defaultdict(int)
        total: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.seconds.items():
            count[key(nodeid)] += 1
            total[key(nodeid)] += seconds
        return sorted(((k, count[k], total[k]) for k in total), key=lambda row: -row[2])

    def lines(self, files: int = 15, backends: list[str] = ()) -> list[str]:
        wall = time.monotonic() - self.started
        spent = sum(self.seconds.values())
        out = [f"wall {wall:.0f} s; test time {spent:.0f} s summed over workers "
               f"({len(self.seconds)} tests)", "", f"{'folder':<34} {'tests':>6} {'seconds':>8} {'share':>6}"]
        for name, count, seconds in self.totals("folder"):
            out.append(f"{name:<34} {count:>6} {seconds:>8.1f} {seconds / max(spent, 1e-9):>6.1%}")
        out += ["", f"{'file (the ' + str(files) + ' slowest)':<52} {'tests':>6} {'seconds':>8}"]
        for name, count, seconds in self.totals("file")[:files]:
            out.append(f"{name:<52} {count:>6} {seconds:>8.1f}")
        if backends:
            out += ["", f"{'backend (as the test names it)':<34} {'tests':>6} {'seconds':>8} {'share':>6}"]
            for name, count, seconds in self.by_backend(list(backends)):
                out.append(f"{name:<34} {count:>6} {seconds:>8.1f} {seconds / max(spent, 1e-9):>6.1%}")
        return out


def _backend_named(nodeid: str, names: list[str]) -> str:
    path, _, test = nodeid.partition("::")
    function, _, params = test.partition("[")
    for part in (params, PurePosixPath(path).stem, function):
        words = re.split(r"[^a-z0-9]+", part.lower())
        named = [w for w in words if w in names]
        if named:
            return named[0]
    return NO_BACKEND
