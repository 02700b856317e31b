"""What bench says a model costs to load and hold measures what its names say: the cold load comes
after the artifact's pages were dropped from the page cache; the model's memory is what the load adds
(anonymous for memory the runtime owns, file-backed for weights mapped from the file); a bigger model
adds more; the compile time is the runtime's own part of the warm load."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from vitexport import backends
from vitexport.bench import loadcost

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc only")
MB = 1_000_000


def test_the_cold_load_follows_dropping_the_files_pages(tmp_path, monkeypatch):
    files = [tmp_path / "model.onnx", tmp_path / "model.onnx.data"]
    for f in files:
        f.write_bytes(b"x" * 10_000)
    events = []
    real = os.posix_fadvise

    def fadvise(fd, offset, length, advice):
        events.append(("drop", os.readlink(f"/proc/self/fd/{fd}"), advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    runner, costs = loadcost.load_costs(lambda: events.append(("load",)) or object(), lambda r: None, files)
    assert [e[0] for e in events] == ["drop", "drop", "load", "load"]  # dropped, cold load, warm load
    assert {e[1] for e in events if e[0] == "drop"} == {str(f) for f in files}
    assert all(e[2] == os.POSIX_FADV_DONTNEED for e in events if e[0] == "drop")
    assert costs["cold_dropped"] is True and costs["load_cold_s"] >= 0 and costs["load_warm_s"] >= 0


def test_owned_memory_is_anonymous_and_mapped_weights_are_file_backed(tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(os.urandom(64 * MB))

    def owned():
        block = bytearray(80 * MB)
        block[::4096] = b"\1" * len(block[::4096])
        return block

    def mapped():
        with open(weights, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        sum(m[i] for i in range(0, len(m), 4096))  # touch every page, as a runtime reading its weights
        return m

    _, anon = loadcost.load_costs(owned, lambda r: None, [])
    _, file = loadcost.load_costs(mapped, lambda m: m.close(), [weights])
    assert anon["model_anon_mb"] >= 75 and anon["model_file_mb"] < 10
    assert file["model_file_mb"] >= 60 and file["model_anon_mb"] < 10


MEASURE = """
import json, sys
from pathlib import Path
from vitexport.backends import get
from vitexport.bench.loadcost import artifact_files, load_costs
from vitexport.export import sidecar
path = Path(sys.argv[1]); record = sidecar.read(path); be = get("onnx")
_, costs = load_costs(lambda: be.load(path, record).__enter__(), lambda r: r.__exit__(None, None, None),
                      artifact_files(path, be.files(path, record)))
print(json.dumps(costs))
"""


def test_a_bigger_model_adds_more_memory_in_onnx_runtime(out_dir):
    import json
    import subprocess
    import sys

    from vitexport.export import pipeline
    from vitexport.models.sources import SourceSpec, load

    added, weights = {}, {}
    for depth in (1, 12):
        spec = SourceSpec("tiny", overrides={"depth": depth})
        weights[depth] = 4 * sum(p.numel() for p in load(spec).model.parameters()) / 1e6  # fp32, MB
        result = pipeline.export("onnx", spec, None, out_dir)
        # In a fresh process, as in a bench worker: this one's freed heap would hide new allocations.
        run = subprocess.run([sys.executable, "-c", MEASURE, result["artifact"]], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        costs = json.loads(run.stdout.strip().splitlines()[-1])
        assert costs["cold_dropped"] is True
        added[depth] = costs["model_anon_mb"] + costs["model_file_mb"]
    # eleven more blocks of ViT-Ti: about 19.5 MB more weights, and at least that much more memory
    assert added[12] - added[1] >= 0.9 * (weights[12] - weights[1]) > 15


class Loaded:
    def __init__(self, compile_s):
        self.compile_s = compile_s


def test_the_compile_time_is_the_warm_loads():
    made = iter([Loaded(5.0), Loaded(0.25)])  # cold, then warm: the warm one is kept and reported
    runner, costs = loadcost.load_costs(lambda: next(made), lambda r: None, [])
    assert runner.compile_s == costs["compile_s"] == 0.25


# The runtimes here that report a compile step of their own (Runner.compile_s); the others say None.
COMPILING = {"onnx", "openvino", "executorch", "litert"}


@pytest.mark.parametrize("backend", [be.name for be in backends.exporters()])
def test_compile_time_is_part_of_the_load_where_the_runtime_separates_it(backend, out_dir):
    from vitexport.export import pipeline, sidecar
    from vitexport.models.sources import SourceSpec

    be = backends.get(backend)
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    result = pipeline.export(backend, SourceSpec("tiny", overrides={"depth": 1}), None, out_dir)
    path = Path(result["artifact"])
    record = sidecar.read(path)
    if not be.runs_here_for(record).ok:
        pytest.skip(be.runs_here_for(record).reason)
    runner, costs = loadcost.load_costs(lambda: be.load(path, record).__enter__(),
                                        lambda r: r.__exit__(None, None, None), [])
    runner.__exit__(None, None, None)
    if backend in COMPILING:
        assert 0 < costs["compile_s"] <= costs["load_warm_s"]
    else:
        assert costs["compile_s"] is None
