"""Cells on a Ray cluster (`pip install 'vitexport[ray]'`; imported only with --ray). The pool lives in
the run's Ray driver process (`vitexport.matrix.ray_driver`), the only one that imports Ray.

- Exports run as Ray tasks on any node (one CPU each), except those that read files of this machine
  (weights, an `hf:` folder, a model file, images, calibration images): they run on this machine's
  node, where those files are.
- A timing for device NAME runs only on a node that carries the custom resource `device:NAME`
  (`ray start --resources='{"device:NAME": 1}'`). It takes the whole resource and all of that node's
  CPUs, so no other timing and no export shares the node while it measures.
- Artifacts travel by content: an export task returns the artifact's bytes (through Ray's object
  store), which are written into the matrix folder here; a timing task receives them and writes
  them into a temporary folder on its node. Each side checks the files against the sha256 their
  sidecar records before using them; nothing relies on a path being shared between machines.

`--ray local` starts a cluster on this machine whose node carries `device:<--device>` (default
`device:local`) and stops it at the end, also when the run is interrupted; `--ray ADDRESS` joins a
running cluster, and its nodes run this vitexport's code (shipped with each task); a cluster that
requires a token is joined with Ray's own (`vitexport.matrix.ray_auth`).

While it runs, the cluster is watched (`vitexport.matrix.ray_watch`): a device that no live node
carries any more is said at once, its timings wait `node_wait` seconds for a node to join and then end
as errors with the reason; a lost head (or connection to it) ends the run with `ClusterLost` within
seconds. Whatever ends it early, the tasks still out are cancelled (`ray.cancel`) and `cancel` says
which.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from vitexport.core.errors import BackendUnavailable, ClusterLost
from vitexport.core.termination import signal_in
from vitexport.matrix.cells import describe

PROBE_TIMEOUT_S = 600  # a device node may first install the task's runtime environment
CONNECT_TIMEOUT_S = 10  # a head that does not answer a TCP connection by then is unreachable from here
RAY_PORT = 6379  # the head's default GCS port, when an address names none
CANCEL_WAIT_S = 30  # how long cancelled tasks get to clean up before the cluster is stopped
NODE_WAIT_S = 60.0  # default --node-wait: how long timings wait for a node with their device to join


NEEDS_RAY = "--ray needs Ray: pip install 'vitexport[ray]'"


def require_ray():
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(NEEDS_RAY) from None
    return ray


def check_installed() -> None:
    """Ray is importable here (without importing it: the run's own process never does)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise BackendUnavailable(NEEDS_RAY)


class RayPool:
    def __init__(self, address: str, device: str, node_wait: float = NODE_WAIT_S,
                 say: Callable[[str], None] | None = None):
        ray = self.ray = require_ray()
        self.address, self.node_wait = address, node_wait
        self.say = say or (lambda line: None)
        connect(ray, address, device)
        self.driver_node = ray.get_runtime_context().get_node_id()
        self.pending: dict[Any, tuple[Any, str, dict]] = {}
        self.packed: dict[str, Any] = {}  # artifact path here -> ObjectRef of its packed bytes
        self.cpus: dict[str, float] = {}
        self.placement = None
        from vitexport.matrix.ray_watch import Watch

        self.watch = Watch(ray.nodes, head_of(ray, address), local=raylet_of(ray, self.driver_node)).start()

    def where(self) -> str:
        return where(self.address)

    def devices(self, names: tuple[str, ...], threads: int | None) -> dict[str, dict]:
        """For each device: the fingerprint of a node that carries it and the nodes that do, or why none can."""
        ray = self.ray
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        out, probes = {}, {}
        for name in names:
            resource = f"device:{name}"
            carriers = [n for n in nodes if n.get("Resources", {}).get(resource, 0) > 0]
            if not carriers:
                out[name] = {"reason": f"no node of the Ray cluster carries the resource {resource} (start one with "
                                       f"ray start --address=HEAD:6379 --resources='{{\"{resource}\": 1}}')"}
                continue
            self.cpus[name] = min(n["Resources"].get("CPU", 0) for n in carriers)
            task = ray.remote(fingerprint_on_node).options(resources={resource: 0.001}, num_cpus=0)
            probes[name] = (task.remote(threads), [n["NodeID"] for n in carriers])
        for name, (ref, node_ids) in probes.items():
            try:
                fingerprint, _ = ray.get(ref, timeout=PROBE_TIMEOUT_S)
                out[name] = {"fingerprint": fingerprint, "nodes": node_ids}
            except Exception as e:  # the node is gone, or never answered
                ray.cancel(ref)
                out[name] = {"reason": f"the node carrying device:{name} did not answer: {describe(e)}"}
        from vitexport.matrix.ray_watch import Node, Placement

        carriers = {name: [Node.from_ray(n) for n in nodes if n["NodeID"] in out[name]["nodes"]]
                    for name in out if "fingerprint" in out[name]}
        self.placement = Placement(self.node_wait, {name: self.cpus[name] for name in carriers}, carriers)
        return out

    def submit(self, ticket: Any, kind: str, job: dict, device: str | None = None) -> None:
        ray = self.ray
        if kind == "export":
            options: dict[str, Any] = {"num_cpus": 1, "num_returns": 2}
            if job.get("pinned"):
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.driver_node, soft=False)
            result, packed = ray.remote(export_on_node).options(**options).remote(job)
            self.pending[result] = (ticket, kind, {"job": job, "packed": packed})
            return
        path = job["artifact"]
        if path not in self.packed:
            from vitexport.matrix.cells import pack

            packed = pack(Path(path))
            self.confirmed()  # ray.put into a lost node's store ends this process without a word
            self.packed[path] = ray.put(packed)
        task = ray.remote(time_on_node).options(resources={f"device:{device}": 1}, num_cpus=self.cpus[device])
        self.pending[task.remote(job, self.packed[path])] = (ticket, kind, {"job": job, "device": device})

    def collect(self, timeout: float) -> list[tuple[Any, dict]]:
        ray = self.ray
        if not self.pending:
            return []
        finished = self.watched()
        if finished:
            return finished
        try:
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=timeout)
            if ready:  # and whatever else is done by now
                ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
        except Exception as e:  # a signal inside Ray's call, or the driver's own connection broke
            interrupted = signal_in(e)
            if interrupted is not None:
                raise interrupted from None
            raise ClusterLost(f"lost the connection to {self.where()}: {self.watch.head_lost or describe(e)}") from None
        for ref in ready:
            ticket, kind, extra = self.pending[ref]
            try:
                result = ray.get(ref)
                if kind == "export":
                    result = self.arrived(result, extra)
            except ClusterLost:  # seen just now: what finished before it is kept, the next call raises again
                if finished:
                    return finished
                raise
            except Exception as e:
                interrupted = signal_in(e)
                if interrupted is not None:  # the task stays pending: close() cancels it
                    raise interrupted from None
                result = {"status": "error", "reason": describe(getattr(e, "cause", None) or e), "seconds": None,
                          "rows": []}
            del self.pending[ref]
            finished.append((ticket, result))
        return finished

    def confirmed(self) -> None:
        """ClusterLost now, before a call into Ray's object store, if the head or this machine's node is gone."""
        lost = self.watch.confirm()
        if lost:
            raise ClusterLost(f"lost {self.where()}: {lost}")

    def watched(self) -> list[tuple[Any, dict]]:
        """What watching the cluster changes: ClusterLost once the head is lost; a line when a
        device's last node left (or one joined again); the timings that waited for a device in vain,
        cancelled and returned as errors with the reason."""
        if self.watch.head_lost:
            raise ClusterLost(f"lost {self.where()}: {self.watch.head_lost}")
        if self.placement is None:
            return []
        needed = {extra["device"] for _, kind, extra in self.pending.values() if kind == "timing"}
        alive, left = self.watch.snapshot()
        if not self.watch.seen.is_set():
            return []
        notices, expired = self.placement.update(alive, left, needed, time.monotonic())
        for line in notices:
            self.say(line)
        finished = []
        for ref, (ticket, kind, extra) in list(self.pending.items()):
            if kind == "timing" and extra["device"] in expired:
                try:
                    self.ray.cancel(ref)  # still pending: it never starts
                except Exception:  # already gone with its node
                    pass
                del self.pending[ref]
                finished.append((ticket, {"status": "error", "reason": self.placement.reason(extra["device"]),
                                          "rows": [], "machine": None, "seconds": None, "ran": False}))
        return finished

    def arrived(self, result: dict, extra: dict) -> dict:
        """Write an exported artifact's bytes into the matrix folder, checked against its sidecar."""
        from vitexport.core.errors import ParityError
        from vitexport.export.staging import prepare_out_dir, publish, staging
        from vitexport.matrix.cells import unpack

        packed_ref = extra["packed"]
        self.confirmed()  # the bytes come through this machine's object store
        packed = self.ray.get(packed_ref)
        if packed is None:
            return result
        folder = prepare_out_dir(Path(extra["job"]["out"]) / packed["folder"])
        try:
            with staging(folder) as stage:
                unpack(packed, stage)
                publish(stage, folder)
        except ParityError as e:
            return {**result, "status": "failed", "reason": str(e)}
        path = folder / packed["artifact"]
        result["result"]["artifact"] = str(path)
        self.packed[str(path)] = packed_ref  # timings send the bytes on from the object store, not from here
        return result

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def cancel(self, lost: bool = False) -> str | None:
        """Cancel the tasks still out and say which (`lost`: the head is gone, so nothing waits for
        them to answer); None when none was."""
        ray = self.ray
        self.watch.stop()
        if not self.pending:
            return None
        kinds = [kind for _, kind, _ in self.pending.values()]
        for ref in self.pending:
            try:
                ray.cancel(ref)  # raises in the task, whose cleanup then runs
            except Exception:
                pass
        if not lost:
            try:
                ray.wait(list(self.pending), num_returns=len(self.pending), timeout=CANCEL_WAIT_S)
            except Exception:
                pass
        self.pending = {}
        return f"cancelled {tasks(kinds)} on {self.where()}"

    def close(self) -> None:
        """End the run's use of the cluster: stop a cluster started here, leave a joined one running.
        After a lost head the connection is left as it is (the driver process ends without it):
        disconnecting from a head that is gone waits for it."""
        self.watch.stop()
        self.pending = {}
        if not self.watch.head_lost:
            self.ray.shutdown()


def connect(ray, address: str, device: str) -> None:
    """Join the cluster at `address` (or start one here for "local", its node carrying `device`);
    refusals as our errors, the process's signal handlers as they were."""
    # ERROR: Ray's own notices (token authentication, ...) are not the user's concern; its errors are.
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    if address not in ("local", "auto"):
        check_reachable(address)
        join_checks(address)
    from ray.exceptions import AuthenticationError

    handlers = {sig: signal.getsignal(sig) for sig in caught_signals()}
    try:
        if address == "local":
            ray.init(address="local", resources={f"device:{device}": 1}, **options)
        else:  # the nodes run this machine's vitexport: shipped with the job
            ray.init(address=address, runtime_env={"py_modules": [package_folder()],
                                                   "excludes": ["__pycache__", "*.pyc"]}, **options)
    except AuthenticationError:  # the head refused the token after the check above let it by
        from vitexport.matrix.ray_auth import refused

        ray.shutdown()
        raise BackendUnavailable(refused(address)) from None
    except (ConnectionError, ValueError, RuntimeError) as e:
        ray.shutdown()
        raise BackendUnavailable(f"cannot reach the Ray cluster at {address}: {describe(e)}") from None
    except BaseException:  # interrupted while the cluster started: stop what did start
        ray.shutdown()
        raise
    finally:
        restore(handlers)  # ray.init's SIGTERM handler exits 1 (or 15): the contract's 143 is ours to give


def where(address: str) -> str:
    return "a local Ray cluster" if address == "local" else f"the Ray cluster at {address}"


def tasks(kinds: list[str]) -> str:
    """'3 Ray tasks (2 timings, 1 export)'."""
    counts = {k: kinds.count(k) for k in ("export", "timing") if k in kinds}
    inner = ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in counts.items())
    return f"{len(kinds)} Ray task{'s' if len(kinds) != 1 else ''} ({inner})"


def caught_signals() -> list:
    from vitexport.core.termination import caught

    return caught()


def restore(handlers: dict) -> None:
    """Put back the signal handlers that were there before ray.init replaced some of them."""
    for sig, handler in handlers.items():
        try:
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        except (OSError, ValueError):  # not the main thread: Ray set nothing there either
            pass


def join_checks(address: str) -> None:
    """Before joining: a token to send when RAY_AUTH_MODE=token, and a head that accepts ours."""
    from vitexport.matrix.ray_auth import check_authenticated, check_token_given

    check_token_given(address)
    if "://" not in address:  # a head's GCS address (ray:// is Ray's client server: it checks the token itself)
        check_authenticated(address, hostport(address))


def head_of(ray, address: str) -> tuple[str, int]:
    """The head's GCS host and port, which the watch knocks on."""
    try:
        gcs = ray.get_runtime_context().gcs_address
    except Exception:
        gcs = None
    host, _, port = (gcs or hostport(address)).rpartition(":")
    return host.strip("[]"), int(port)


def raylet_of(ray, node_id: str) -> tuple[str, int] | None:
    """This machine's raylet (host, port), whose object store the driver's puts and gets go through."""
    try:
        entry = next(n for n in ray.nodes() if n["NodeID"] == node_id)
        return str(entry["NodeManagerAddress"]), int(entry["NodeManagerPort"])
    except (StopIteration, KeyError, TypeError, ValueError):
        return None


def hostport(address: str) -> str:
    """HOST:PORT of an address (`ray://HOST:PORT`, `HOST`, `[::1]:6379`), with Ray's default port."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        host, port = hostport, str(RAY_PORT)
    return f"{host}:{port}"


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within `timeout_s`, a head address nothing answers at (a typo, a stopped cluster, a
    firewall): ray.init would otherwise retry for minutes and end in its own connection noise."""
    import socket

    host, _, port = hostport(address).rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as e:
        why = "nothing answered" if isinstance(e, socket.timeout) else (e.strerror or str(e) or type(e).__name__)
        raise BackendUnavailable(f"cannot reach the Ray cluster at {address} within {timeout_s:g} s: {why} "
                                 f"(is the head running? `ray start --head` prints its address)") from None


def package_folder() -> str:
    return str(Path(__file__).resolve().parents[1])  # vitexport/, from vitexport/matrix/ray_pool.py


def node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


# ------------------------------------------------------------------------ what runs on the nodes

def fingerprint_on_node(threads: int | None) -> tuple[dict, str]:
    from vitexport.bench.fingerprint import fingerprint

    return fingerprint(threads), node_id()


def export_on_node(job: dict) -> tuple[dict, dict | None]:
    """Export in a temporary folder on this node; return the result and the artifact as bytes."""
    from vitexport.matrix.cells import export_cell, pack

    with tempfile.TemporaryDirectory(prefix="vitexport-matrix-") as tmp:
        result = export_cell({**job, "out": tmp})
        result["node"] = node_id()
        made = result.get("result") or {}
        if not made.get("artifact") or result["status"] not in ("passed", "failed", "unchecked"):
            return result, None
        path = Path(made["artifact"])
        packed = pack(path)
        packed["folder"] = path.parent.resolve().relative_to(Path(tmp).resolve()).as_posix()  # "." or "failed"
        return result, packed


def time_on_node(job: dict, packed: dict) -> dict:
    """Write the artifact's bytes into a temporary folder on this node, check them, and time them."""
    from vitexport.core.errors import ParityError
    from vitexport.matrix.cells import timing_cell, unpack

    with tempfile.TemporaryDirectory(prefix="vitexport-matrix-") as tmp:
        try:
            path = unpack(packed, Path(tmp))
        except ParityError as e:
            return {"status": "failed", "reason": str(e), "rows": [], "machine": None, "seconds": None,
                    "node": node_id()}
        result = timing_cell({**job, "artifact": str(path), "scratch": tmp})
        result["node"] = node_id()
        return result
