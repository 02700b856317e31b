"""The driver process between a `--ray` run and Ray (vitexport.matrix.ray_driver): the same pool
methods as RayPool, the child's errors raised here as vitexport's own, and a child that dies (a crash
inside Ray) is a lost cluster, not a silent end. The crash on a real cluster: test_matrix_ray_faults."""

from __future__ import annotations

import inspect
import signal

import pytest

from vitexport.core.errors import BackendUnavailable, ClusterLost, ExitCode
from vitexport.matrix import ray_driver
from vitexport.matrix.ray_pool import RayPool


def public(cls) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def test_the_driver_offers_every_method_of_the_pool_the_run_calls():
    used = {"devices", "submit", "collect", "busy", "cancel", "close", "where"}
    assert used <= public(RayPool) and used <= public(ray_driver.RayDriver)
    for name in used - {"busy"}:  # the same arguments, so the run cannot tell them apart
        pool = list(inspect.signature(getattr(RayPool, name)).parameters)
        driver = list(inspect.signature(getattr(ray_driver.RayDriver, name)).parameters)
        assert driver[:len(pool)] == pool, name


def test_the_childs_errors_keep_their_class_and_exit_code():
    error = ray_driver.rebuilt("BackendUnavailable", "cannot reach the Ray cluster at 10.0.0.5:6379")
    assert type(error) is BackendUnavailable and error.exit_code == ExitCode.UNAVAILABLE
    assert type(ray_driver.rebuilt("ClusterLost", "lost it")) is ClusterLost
    other = ray_driver.rebuilt("KeyError", "'NodeID'")  # a bug of the child's: named, never a vitexport error
    assert type(other) is RuntimeError and "KeyError" in str(other)
    assert type(ray_driver.rebuilt("Path", "x")) is RuntimeError  # a name in errors that is no error class


def child(monkeypatch, code: str) -> None:
    """Start `code` (Python, the channel's descriptor in sys.argv[1]) as the driver's child."""
    pytest.importorskip("ray")  # the driver checks Ray is there before it starts its child
    real = ray_driver.subprocess.Popen

    def started(args, **kwargs):  # [python, -m, module, FD, ADDRESS, DEVICE, NODE_WAIT]
        return real([args[0], "-c", code, *args[3:]], **kwargs)

    monkeypatch.setattr(ray_driver.subprocess, "Popen", started)


def test_a_child_that_dies_before_answering_is_a_lost_cluster(monkeypatch):
    # The child's first act, joining the cluster, ends it: a crash inside Ray as the run sees one.
    child(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(ClusterLost, match=r"lost the Ray cluster at 127\.0\.0\.1:1: the process that talks to it "
                                          r"\(python -m vitexport\.matrix\.ray_driver\) killed by SIGSEGV"):
        ray_driver.RayDriver("127.0.0.1:1", "edge", 1.0)


# A child that speaks the protocol: its collect takes a second and returns what was submitted as done.
FINISHING = """
import sys, time
from multiprocessing.connection import Connection
conn, out = Connection(int(sys.argv[1])), []
while True:
    try:
        method, args = conn.recv()
    except EOFError:
        break
    if method == "submit":
        out.append(args[0])
    if method == "collect":
        time.sleep(1.0)
        conn.send(("ok", [(number, {"status": "timed"}) for number in out]))
        out.clear()
    else:
        conn.send(("ok", None))
"""


def test_work_whose_answer_a_signal_cut_off_is_said_cancelled(monkeypatch):
    child(monkeypatch, FINISHING)
    driver = ray_driver.RayDriver("127.0.0.1:1", "edge", 1.0)
    driver.submit(object(), "timing", {}, "edge")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # while the child's answer is still a second away
        with pytest.raises(KeyboardInterrupt):
            driver.collect(1.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # The child finished it, but the run never had the answer: its cell ends `cancelled`, and so says the line.
    assert driver.cancel() == "cancelled 1 Ray task (1 timing) on the Ray cluster at 127.0.0.1:1"
    assert not driver.busy and driver.cancel() is None
    driver.close()
    assert driver.proc.returncode == 0
