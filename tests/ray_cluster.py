"""A throwaway two-node Ray cluster on the loopback address, for the matrix's cluster tests.

It lives in a process of its own (`python tests/ray_cluster.py`), so the test process holds no Ray
state and a node can be killed under a `vitexport matrix --ray ADDRESS` run as a crash would. It is
`ray.cluster_utils.Cluster`, Ray's own multi-node test cluster, rather than `ray start`: the CLI's
only way to stop a cluster, `ray stop`, ends every Ray process of the user on the machine.

The process prints one JSON line, {"address", "head", "edge"} (node ids; the edge node carries
`device:edge`), then answers each command on its stdin with one JSON line:
`remove edge` / `remove head` (that node's processes killed at once), `add edge` (a fresh node with
`device:edge`), `resources` (the cluster's available resources), `quit`.

Its environment is the cluster's: `RAY_AUTH_MODE=token` with a token makes a cluster that requires it
(an environment value None unsets that variable).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Every node, and every driver given LOOPBACK in its environment, on 127.0.0.1: Ray's single-machine
# mode (its default on macOS and Windows), so nothing of the tests listens to or calls another address.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
HEAD = {"num_cpus": 1, "include_dashboard": False}
EDGE = {"num_cpus": 1, "resources": {"device:edge": 1}}
LOCK = Path(tempfile.gettempdir()) / "vitexport-tests-ray-cluster.lock"


def serve() -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=HEAD)
    try:
        edge = cluster.add_node(**EDGE)
        cluster.wait_for_nodes()
        answer({"address": cluster.address, "head": cluster.head_node.node_id, "edge": edge.node_id})
        for line in sys.stdin:
            command = line.strip()
            if command == "quit":
                break
            if command == "remove edge":
                cluster.remove_node(edge, allow_graceful=False)
                answer({"removed": edge.node_id, "at": time.time()})
            elif command == "remove head":
                head = cluster.head_node.node_id
                cluster.remove_node(cluster.head_node, allow_graceful=False)
                answer({"removed": head, "at": time.time()})
            elif command == "add edge":
                edge = cluster.add_node(**EDGE)
                answer({"added": edge.node_id})
            elif command == "resources":
                answer(cluster.global_state.available_resources())
            else:
                answer({"error": f"unknown command {command!r}"})
    finally:  # at once: a throwaway cluster has nothing to drain (Ray's graceful stop takes seconds a node)
        for node in list(cluster.worker_nodes):
            cluster.remove_node(node, allow_graceful=False)
        if cluster.head_node is not None:
            cluster.remove_node(cluster.head_node, allow_graceful=False)


def answer(message: dict) -> None:
    print(json.dumps(message), flush=True)


class Handle:
    """The test's side: the cluster's address and node ids, and its commands."""

    def __init__(self, proc: subprocess.Popen, info: dict):
        self.proc, self.address, self.head, self.edge = proc, info["address"], info["head"], info["edge"]

    def send(self, command: str, timeout: float = 60) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return read_line(self.proc, timeout)


def read_line(proc: subprocess.Popen, timeout: float) -> dict:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError(f"the test cluster did not answer within {timeout} s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the test cluster ended (exit {proc.wait()})")
    return json.loads(line)


@contextlib.contextmanager
def one_at_a_time():
    """Hold the machine's one test cluster slot: Ray clusters are heavy on two cores, and the suite
    runs on several workers."""
    import fcntl

    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def ray_cluster(env: dict | None = None):
    """A running two-node cluster (see the module's note); stopped, whatever happens, on the way out."""
    with one_at_a_time():
        environment = {k: v for k, v in {**os.environ, **LOOPBACK, **(env or {})}.items() if v is not None}
        proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=environment, start_new_session=True)
        try:
            yield Handle(proc, read_line(proc, 120))
        finally:
            try:
                proc.stdin.write("quit\n")
                proc.stdin.close()
                proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its session: the cluster's processes, started here
                proc.wait()


if __name__ == "__main__":
    serve()
