"""Cells on a Ray cluster (`pip install 'vitexport[ray]'`; imported only with --ray).

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
running cluster, and its nodes run this vitexport's code (shipped with each task).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from vitexport.core.errors import BackendUnavailable
from vitexport.matrix.cells import describe

PROBE_TIMEOUT_S = 600  # a device node may first install the task's runtime environment
CONNECT_TIMEOUT_S = 10  # a head that does not answer a TCP connection by then is unreachable from here
RAY_PORT = 6379  # the head's default GCS port, when an address names none
CANCEL_WAIT_S = 30  # how long cancelled tasks get to clean up before the cluster is stopped


def require_ray():
    try:
        import ray
    except ImportError:
        raise BackendUnavailable("--ray needs Ray: pip install 'vitexport[ray]'") from None
    return ray


class RayPool:
    def __init__(self, address: str, device: str):
        ray = self.ray = require_ray()
        self.address, self.owned = address, False
        if not ray.is_initialized():  # else the caller's own connection is used as it is
            # ERROR: Ray's own notices (token authentication, ...) are not the user's concern; its errors are.
            options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
            if address not in ("local", "auto"):
                check_reachable(address)
            try:
                if address == "local":
                    ray.init(address="local", resources={f"device:{device}": 1}, **options)
                else:  # the nodes run this machine's vitexport: shipped with the job
                    ray.init(address=address, runtime_env={"py_modules": [package_folder()],
                                                           "excludes": ["__pycache__", "*.pyc"]}, **options)
            except (ConnectionError, ValueError, RuntimeError) as e:
                ray.shutdown()
                raise BackendUnavailable(f"cannot reach the Ray cluster at {address}: {describe(e)}") from None
            except BaseException:  # interrupted while the cluster started: stop what did start
                ray.shutdown()
                raise
            self.owned = True
        self.driver_node = ray.get_runtime_context().get_node_id()
        self.pending: dict[Any, tuple[Any, str, dict]] = {}
        self.packed: dict[str, Any] = {}  # artifact path here -> ObjectRef of its packed bytes
        self.cpus: dict[str, float] = {}

    def where(self) -> str:
        return "a local Ray cluster" if self.address == "local" else f"the Ray cluster at {self.address}"

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

            self.packed[path] = ray.put(pack(Path(path)))
        task = ray.remote(time_on_node).options(resources={f"device:{device}": 1}, num_cpus=self.cpus[device])
        self.pending[task.remote(job, self.packed[path])] = (ticket, kind, {"job": job})

    def collect(self, timeout: float) -> list[tuple[Any, dict]]:
        ray = self.ray
        if not self.pending:
            return []
        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=timeout)
        if ready:  # and whatever else is done by now
            ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
        finished = []
        for ref in ready:
            ticket, kind, extra = self.pending.pop(ref)
            try:
                result = ray.get(ref)
                if kind == "export":
                    result = self.arrived(result, extra)
            except Exception as e:
                result = {"status": "error", "reason": describe(getattr(e, "cause", None) or e), "seconds": None,
                          "rows": []}
            finished.append((ticket, result))
        return finished

    def arrived(self, result: dict, extra: dict) -> dict:
        """Write an exported artifact's bytes into the matrix folder, checked against its sidecar."""
        from vitexport.core.errors import ParityError
        from vitexport.export.staging import prepare_out_dir, publish, staging
        from vitexport.matrix.cells import unpack

        packed_ref = extra["packed"]
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

    def close(self, abort: bool) -> None:
        ray = self.ray
        if abort and self.pending:
            for ref in self.pending:
                ray.cancel(ref)  # raises in the task, whose cleanup then runs
            try:
                ray.wait(list(self.pending), num_returns=len(self.pending), timeout=CANCEL_WAIT_S)
            except Exception:
                pass
        self.pending = {}
        if self.owned:
            ray.shutdown()  # stops a cluster started here; leaves a joined one running


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within `timeout_s`, a head address nothing answers at (a typo, a stopped cluster, a
    firewall): ray.init would otherwise retry for minutes and end in its own connection noise."""
    import socket

    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        host, port = hostport, str(RAY_PORT)
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
