"""The matrix on a Ray cluster of two nodes, one of which carries a device: timings for that device
run there and nowhere else, exports that read this machine's files run on this machine's node, and
artifacts reach the matrix folder by content. One cluster serves every test here (it is slow to start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitexport.matrix.plan import load_plan
from vitexport.matrix.run import run

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]
PLAN = f"""
[bench]
batches = [1, 2]
warmup_iters = 1
warmup_s = 0
iters = 5
roofline = false
devices = ["edge", "lab"]

[[models]]
config = "tiny"
set = {{ depth = 1 }}

[[targets]]
backend = "onnx"
precision = "fp32"
options = {{ dynamic_batch = true }}

[[targets]]
backend = "onnx"
precision = "int8"
options = {{ dynamic_batch = true, quant = "static", calibration_images = "{ROOT / 'samples' / 'images'}" }}
"""


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster
    from ray_cluster import one_at_a_time

    with one_at_a_time():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        try:
            edge = c.add_node(num_cpus=1, resources={"device:edge": 1})
            c.wait_for_nodes()
            yield c, c.head_node.node_id, edge.node_id
        finally:
            c.shutdown()


@pytest.fixture(scope="module")
def first(cluster, tmp_path_factory):
    c, head, edge = cluster
    folder = tmp_path_factory.mktemp("matrix-ray")
    plan = folder / "plan.toml"
    plan.write_text(PLAN)
    return plan, folder / "out", run(load_plan(plan), folder / "out", ray=c.address)


def test_timings_for_a_device_run_on_its_node_and_nowhere_else(cluster, first):
    _, head, edge = cluster
    plan, out, merged = first
    assert not ray.is_initialized()  # the run's own connection is closed; the cluster stays up
    cells = merged["matrix"]["cells"]
    on_edge = [c for c in cells if c["device"] == "edge"]
    assert len(on_edge) == 2 and {c["status"] for c in on_edge} == {"passed"}
    nodes = {t["node"] for c in on_edge for t in c["timings"]}
    assert nodes == {edge}
    assert all(t["rows"][0]["available"] for c in on_edge for t in c["timings"])
    lab = [c for c in cells if c["device"] == "lab"]
    assert {c["status"] for c in lab} == {"unavailable"} and "device:lab" in lab[0]["reason"]
    assert merged["matrix"]["devices"]["edge"]["nodes"] == [edge]
    assert merged["matrix"]["exit_code"] == 0


def test_exports_that_read_local_files_run_on_this_machines_node(cluster, first):
    _, head, edge = cluster
    plan, out, merged = first
    exports = {c["precision"]: c["export"] for c in merged["matrix"]["cells"] if c["device"] == "edge"}
    assert exports["int8"]["node"] == head  # its calibration images are here
    assert exports["fp32"]["node"] in (head, edge)


def test_artifacts_arrive_by_content(first):
    from vitexport import backends
    from vitexport.export import sidecar
    from vitexport.export.integrity import integrity_problem

    plan, out, merged = first
    for cell in merged["matrix"]["cells"]:
        path = out / cell["export"]["artifact"]
        record = sidecar.read(path)
        assert record.artifact_sha256 == cell["export"]["artifact_sha256"]
        assert integrity_problem(backends.get(record.backend), path, record) is None
        assert not str(path).startswith("/tmp/vitexport-matrix-")


def test_a_rerun_on_the_cluster_comes_from_the_cache(cluster, first):
    c, head, edge = cluster
    plan, out, _ = first
    merged = run(load_plan(plan), out, ray=c.address)
    assert merged["matrix"]["cached"]["exports_run"] == 0 and merged["matrix"]["cached"]["timings_run"] == 0
    assert merged["matrix"]["cached"]["timings"] == 4
