"""A bench worker loads only what its row runs: an ONNX Runtime or OpenVINO row never imports torch
(over a second of start-up and its memory in every such worker), a torch row still fixes torch's
threads before it loads the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vitexport import backends
from vitexport.backends.base import RunOptions
from vitexport.bench.measure import thread_env
from vitexport.export import sidecar
from vitexport.verify.feeds import random_pixels

# The real worker's main loop, then what the process had loaded by the time it closed.
PROBE = ("import json, sys\nfrom vitexport.bench.worker import main\nmain()\n"
         "print('LOADED ' + json.dumps(sorted(m for m in ('torch', 'onnxruntime', 'openvino') if m in sys.modules)),"
         " file=sys.stderr)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny(backend) -> the path of a one-block tiny model's fp32 artifact, exported once."""
    from vitexport import api
    from vitexport.models.sources import SourceSpec

    made: dict[str, Path] = {}

    def get(backend: str) -> Path:
        if backend not in made:
            be = backends.get(backend)
            out = tmp_path_factory.mktemp(backend)
            made[backend] = Path(api.export(backend, SourceSpec("tiny", overrides={"depth": 1}), be.Options(),
                                            out)["artifact"])
        return made[backend]

    return get


def run_worker(target_name: str, artifact: Path | None, record) -> tuple[list[dict], list[str]]:
    """A worker process as `vitexport bench` starts one, taken through a whole row: open, first
    inference, a burst, close. Returns its replies and the heavy modules it had loaded."""
    target = backends.bench_targets()[target_name]
    job = {"kind": "model", "backend": target.backend, "module": backends.REGISTRY[target.backend],
           "artifact": str(artifact) if artifact else None, "record": record.to_dict(), "threads": 1, "seed": 0,
           "run": vars(target.run)}
    requests = [{"op": "open", **job}, {"op": "prepare", "batch": 1, "warmup_iters": 1, "warmup_s": 0},
                {"op": "burst", "batch": 1, "runs": 2}, {"op": "close"}]
    out = subprocess.run([sys.executable, "-c", PROBE], input="".join(json.dumps(r, default=str) + "\n"
                                                                      for r in requests),
                         capture_output=True, text=True, timeout=300, env={**os.environ, **thread_env(1)})
    replies = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    loaded = [line for line in out.stderr.splitlines() if line.startswith("LOADED ")]
    assert out.returncode == 0 and loaded, out.stderr[-2000:]
    return replies, json.loads(loaded[-1][len("LOADED "):])


def test_an_onnxruntime_row_never_imports_torch(tiny):
    artifact = tiny("onnx")
    replies, loaded = run_worker("onnxruntime", artifact, sidecar.read(artifact))
    assert [r["ok"] for r in replies] == [True] * 4, replies
    assert replies[0]["provider"] == "CPUExecutionProvider" and len(replies[2]["samples_ms"]) == 2
    assert loaded == ["onnxruntime"]
    assert "torch" not in replies[0]["threads_applied"] and replies[0]["threads_applied"]["late"] == []


def test_an_openvino_row_never_imports_torch(tiny):
    pytest.importorskip("openvino")
    artifact = tiny("openvino")
    replies, loaded = run_worker("openvino", artifact, sidecar.read(artifact))
    assert [r["ok"] for r in replies] == [True] * 4, replies
    assert replies[0]["provider"].startswith("openvino-CPU") and len(replies[2]["samples_ms"]) == 2
    assert "torch" not in loaded and "openvino" in loaded


def test_a_torch_row_fixes_torch_threads_before_it_loads(tiny):
    artifact = tiny("onnx")
    # The torch row of an artifact rebuilds its recorded model, as `vitexport bench ARTIFACT` does.
    record = replace(sidecar.read(artifact), backend="torch", precision="fp32")
    replies, loaded = run_worker("torch", None, record)
    assert [r["ok"] for r in replies] == [True] * 4, replies
    applied = replies[0]["threads_applied"]
    assert "torch" in loaded and applied["torch"] == 1 and applied["late"] == []


def test_which_rows_run_in_torch():
    from vitexport.bench.worker import runs_torch

    cpu = RunOptions(providers=("CPUExecutionProvider",))
    assert {name for name in ("torch", "torchscript", "onnx", "openvino", "coreml", "tensorrt", "executorch")
            if backends.get(name).runs_torch_for(cpu)} == {"torch", "torchscript", "tensorrt", "executorch"}
    # ONNX Runtime's GPU providers find CUDA and cuDNN through the libraries torch loads.
    targets = backends.bench_targets()
    job = {"kind": "model", "backend": "onnx", "module": backends.REGISTRY["onnx"]}
    assert [runs_torch({**job, "run": vars(targets[name].run)})
            for name in ("onnxruntime", "onnxruntime-cuda", "onnxruntime-tensorrt", "onnxruntime-web",
                         "onnxruntime-webgpu")] == [False, True, True, False, False]  # a browser needs no torch
    assert runs_torch({"kind": "reference"}) is False and runs_torch({"kind": "gemm", "library": "torch"}) is True


def test_the_bench_feed_is_unchanged():
    """The same seed gives the same pixels as ever (numpy's PCG64 stream), so timed inputs never change."""
    x = random_pixels((2, 3, 4, 4), 7, [0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
    assert x.dtype.name == "float32" and x.shape == (2, 3, 4, 4)
    assert x.ravel()[:4].tolist() == [0.6254773139953613, 1.9860689640045166, 1.3784284591674805,
                                      -1.3739640712738037]
    assert float(x.sum()) == 34.40338134765625
    assert (random_pixels((2, 3, 4, 4), 7, [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]) == x).all()
