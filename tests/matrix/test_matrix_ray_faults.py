"""A matrix on a real two-node Ray cluster (tests/ray_cluster.py) that loses its device node, its
head, or gets SIGTERM, or whose Ray driver process crashes, and a cluster that requires a token: each ends with one line, the documented
exit code, every cell in the report and --json, what finished kept; the next run does only the rest."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
from ray_cluster import LOOPBACK, ray_cluster  # noqa: E402  (tests/, after the skip: it is Ray's cluster)

ROOT = Path(__file__).resolve().parents[2]
# Each timing fills a budget of seconds (not a few iterations, which a fast machine ends in
# milliseconds): a signal or a lost node sent once the first cell's line is out always meets the
# second cell's timing, never a run that has already ended.
PLAN = """
[bench]
batches = [1]
warmup_iters = 1
warmup_s = 0
budget_s = 6
roofline = false
devices = ["edge"]

[[models]]
config = "tiny"
set = { depth = 1 }

[[models]]
config = "tiny"
set = { depth = 2 }
name = "tiny2"

[[targets]]
backend = "onnx"
precision = "fp32"
"""


class Run:
    """`vitexport matrix PLAN --ray ADDRESS --json ...` in a process of its own, its stderr read as it comes."""

    def __init__(self, plan: Path, out: Path, address: str, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "vitexport", "matrix", str(plan), "--out", str(out),
                                      "--ray", address, "--json", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=environment(env))
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        self.stdout = ""
        self.readers = [threading.Thread(target=self._read_stderr, daemon=True),
                        threading.Thread(target=self._read_stdout, daemon=True)]
        for reader in self.readers:
            reader.start()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)
            self.lines.put((time.monotonic(), line))
        self.lines.put((time.monotonic(), None))

    def _read_stdout(self) -> None:
        self.stdout = self.proc.stdout.read()

    def wait_for(self, start: str, timeout: float = 120) -> float:
        """The time the first stderr line starting with `start` came."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                at, line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line starting {start!r} in {timeout} s: {''.join(self.stderr)}") from None
            assert line is not None, \
                f"it ended (exit {self.proc.wait()}) before a line starting {start!r}: {''.join(self.stderr)}"
            if line.startswith(start):
                return at

    def end(self, timeout: float = 120) -> tuple[int, dict, str]:
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=30)
        stderr = "".join(self.stderr)
        try:
            return code, json.loads(self.stdout), stderr
        except json.JSONDecodeError:
            raise AssertionError(f"exit {code} without the JSON report on stdout: {stderr}") from None


def token_in(tmp_path: Path) -> dict:
    """The environment of a cluster that requires a token, and of a run that gives it (from a file)."""
    token = tmp_path / "token"
    token.write_text("a0" * 32)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_AUTH_TOKEN": None}


def wrong(tmp_path: Path) -> Path:
    path = tmp_path / "wrong-token"
    path.write_text("b1" * 32)
    return path


def plan_in(tmp_path: Path) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    return plan


def statuses(merged: dict) -> dict[str, str]:
    return {c["model"]: c["status"] for c in merged["matrix"]["cells"]}


def no_leftovers(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.name.startswith(".vitexport-") or ".tmp" in p.name]


@pytest.mark.slow  # a two-node cluster, two refused joins and five runs: about 60 s on two cores
def test_a_token_cluster_loses_its_device_node_gets_sigterm_a_crashed_driver_then_its_head(tmp_path):
    """One cluster for every fault (it takes seconds to start, and the runs hold the machine's one
    cluster slot in turn anyway): the lost device node first, on a run from scratch; the runs after it
    start with one cell finished and time the other, which each fault then stops; the lost head last."""
    plan, out, auth = plan_in(tmp_path), tmp_path / "out", token_in(tmp_path)
    with ray_cluster(env=auth) as cluster:
        # A wrong token, and none sent: each said as such, with how to give it, before any work.
        code, stderr = refused(plan, out, cluster.address, {**auth, "RAY_AUTH_TOKEN_PATH": str(wrong(tmp_path))})
        assert code == 3 and f"refused the token from {wrong(tmp_path)} (RAY_AUTH_TOKEN_PATH)" in stderr, stderr
        assert "`ray get-auth-token` on its head prints it" in stderr
        code, stderr = refused(plan, out, cluster.address, {"RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN": None,
                                                            "RAY_AUTH_TOKEN_PATH": None, "HOME": str(tmp_path)})
        assert code == 3 and f"the Ray cluster at {cluster.address} requires a token" in stderr, stderr
        assert "RAY_AUTH_MODE=token" in stderr

        # The device node lost mid-run (the right token given): said at once, a bounded wait, then the end.
        run = Run(plan, out, cluster.address, "--node-wait", "3", env=auth)
        run.wait_for("[1/2]")  # one cell timed: the other's timing is still to come on the device node
        removed = cluster.send("remove edge")
        said = run.wait_for("no node carries device:edge", timeout=60)
        code, merged, stderr = run.end()
        ended = time.monotonic()
        assert said + (time.time() - time.monotonic()) - removed["at"] < 30  # at once, not after Ray's verdict
        assert code == 1, stderr
        assert f"since node {cluster.edge[:8]} (127.0.0.1) left at" in stderr and "waiting up to 3 s" in stderr
        assert ended - said < 60  # the bounded wait, then the end
        assert "Traceback" not in stderr and "1 cell(s) ended in an error" in stderr
        cells = {c["model"]: c for c in merged["matrix"]["cells"]}
        assert sorted(s for s in statuses(merged).values()) == ["error", "passed"]
        (lost,) = [c for c in cells.values() if c["status"] == "error"]
        assert f"no node carries device:edge since node {cluster.edge[:8]}" in lost["reason"]
        assert "none joined within 3 s (--node-wait)" in lost["reason"]
        assert merged["matrix"]["exit_code"] == 1 and merged["matrix"]["stopped"] is None
        assert merged["matrix"]["cached"]["timings_run"] == 1  # the one that ran; the other waited in vain
        assert json.loads((out / "matrix-plan.json").read_text())["matrix"]["cells"] == merged["matrix"]["cells"]
        assert no_leftovers(out) == []
        timings = set((out / "cache").glob("timing-*.json"))
        assert len(timings) == 1

        # A fresh device node joins: the same command finishes the matrix (in a copy of the folder:
        # `out` keeps its unfinished cell for the faults below).
        cluster.send("add edge")
        again_out = Path(shutil.copytree(out, tmp_path / "again"))
        code, again, stderr = Run(plan, again_out, cluster.address, "--node-wait", "3", env=auth).end()
        assert code == 0, stderr
        assert set(statuses(again).values()) == {"passed"}
        cached = again["matrix"]["cached"]
        assert (cached["exports_run"], cached["timings_run"], cached["timings"]) == (0, 1, 1)
        assert set((out / "cache").glob("timing-*.json")) == timings  # the other folder's run left it as it was

        # SIGTERM mid-run (with the right token): 143, one line saying what was cancelled.
        run = Run(plan, out, cluster.address, env=auth)
        run.wait_for("[1/2]")  # the cached cell
        takes_the_device(cluster)  # the other cell's timing now runs on the device node
        run.proc.send_signal(signal.SIGTERM)
        code, merged, stderr = run.end()
        assert code == 128 + signal.SIGTERM, stderr
        (line,) = [x for x in stderr.splitlines() if x.startswith("interrupted")]
        assert "interrupted by SIGTERM; the cells that finished are kept" in line
        assert re.search(r"cancelled 1 Ray task \(1 (timing|export)\) on the Ray cluster at", line), line
        assert "Traceback" not in stderr
        assert sorted(statuses(merged).values()) == ["cancelled", "passed"]
        assert merged["matrix"]["stopped"]["by"] == "SIGTERM" and merged["matrix"]["exit_code"] == 143
        assert no_leftovers(out) == []
        gives_back_the_device(cluster)  # the cancelled timing
        assert set((out / "cache").glob("timing-*.json")) == timings

        # The process that talks to Ray crashes (as Ray's C++ may crash it): the run ends as on a lost cluster.
        run = Run(plan, out, cluster.address, env=auth)
        run.wait_for("[1/2]")  # the cached cell
        takes_the_device(cluster)  # the other cell's timing now runs on the device node
        os.kill(driver_of(run.proc.pid), signal.SIGSEGV)
        code, merged, stderr = run.end()
        assert code == 1, stderr
        (error,) = [x for x in stderr.splitlines() if x.startswith("error:")]
        assert error.startswith(f"error: lost the Ray cluster at {cluster.address}: the process that talks to it "
                                "(python -m vitexport.matrix.ray_driver) killed by SIGSEGV"), error
        assert "1 of 2 cells finished and are kept" in error and "Traceback" not in stderr
        assert sorted(statuses(merged).values()) == ["cancelled", "passed"]
        assert merged["matrix"]["stopped"]["by"] == "cluster" and no_leftovers(out) == []
        assert set((out / "cache").glob("timing-*.json")) == timings
        gives_back_the_device(cluster)

        # The head lost mid-run: one line naming the address, within seconds; what finished written.
        run = Run(plan, out, cluster.address, env=auth)
        run.wait_for("[1/2]")  # the cached cell
        takes_the_device(cluster)  # the other cell's timing now runs on the device node
        cluster.send("remove head")
        removed = time.monotonic()
        said = run.wait_for("error: lost the Ray cluster", timeout=60)
        code, merged, stderr = run.end()
        assert code == 1, stderr
        errors = [x for x in stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith(f"error: lost the Ray cluster at {cluster.address}: "
                                                         "its head stopped answering at"), stderr
        assert "1 of 2 cells finished and are kept" in errors[0] and "Traceback" not in stderr
        assert said - removed < 30  # Ray alone retries for a minute, then exits without a word
        assert sorted(statuses(merged).values()) == ["cancelled", "passed"]
        assert merged["matrix"]["stopped"]["by"] == "cluster"
        on_disk = json.loads((out / "matrix-plan.json").read_text())
        assert on_disk["matrix"]["cells"] == merged["matrix"]["cells"]
        assert set((out / "cache").glob("timing-*.json")) == timings and no_leftovers(out) == []


def takes_the_device(cluster, within: float = 120) -> None:
    """Wait until a timing holds the device node's one `device:edge` (Ray lists none left as absent)."""
    deadline = time.monotonic() + within
    while cluster.send("resources").get("device:edge", 0.0) != 0.0:
        assert time.monotonic() < deadline, "no timing took device:edge"
        time.sleep(0.2)


def gives_back_the_device(cluster, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while cluster.send("resources").get("device:edge") != 1.0:
        assert time.monotonic() < deadline, "a timing that was stopped still holds device:edge"
        time.sleep(0.5)


def driver_of(pid: int) -> int:
    """The process id of a run's Ray driver (`python -m vitexport.matrix.ray_driver`), its child."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"vitexport.matrix.ray_driver" in command:
            return int(entry.name)
    raise AssertionError(f"process {pid} has no Ray driver child")


def refused(plan: Path, out: Path, address: str, env: dict) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "vitexport", "matrix", str(plan), "--out", str(out), "--ray", address],
                          capture_output=True, text=True, timeout=120, env=environment(env))
    return proc.returncode, proc.stderr


def environment(changes: dict | None) -> dict:
    """This process's environment with this vitexport first on the path, and `changes` (None: unset)."""
    env = {**os.environ, **LOOPBACK, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for name, value in (changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
