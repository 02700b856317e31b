"""A check's runtime gets the threads asked for, else OMP_NUM_THREADS's count (as the PyTorch reference
beside it does), else its own default: every core."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitexport import backends
from vitexport.backends.base import RunOptions
from vitexport.core.errors import BackendUnavailable
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

SPEC = SourceSpec("tiny", overrides={"depth": 1, "image_size": 32})  # the deploy tests' exports: shared


@pytest.mark.parametrize("value,count", [("3", 3), ("4,2", 4), (" 2 ", 2), ("", None), ("0", None),
                                         ("-1", None), ("many", None)])
def test_omp_num_threads_gives_the_count_when_none_is_asked(monkeypatch, value, count):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert RunOptions().thread_count() == count
    assert RunOptions(threads=5).thread_count() == 5  # asked for: the environment does not override it
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert RunOptions().thread_count() is None


@pytest.mark.parametrize("backend", [be.name for be in backends.exporters()])
def test_each_runtime_that_takes_a_thread_count_is_given_omp_num_threads(shared_artifacts, monkeypatch, backend):
    be = backends.get(backend)
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    artifact = Path(shared_artifacts.built(backend, SPEC, be.Options())["artifact"])
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    try:
        runner = be.load(artifact, sidecar.read(artifact), RunOptions())
    except BackendUnavailable as e:  # exit 3's kind: a runtime this machine lacks; any other error fails
        pytest.skip(f"{backend}'s runtime does not load here: {e}")
    if not hasattr(runner, "threads"):
        pytest.skip(f"{backend}'s runtime takes no thread count of its own (torch, numpy follow OMP_NUM_THREADS)")
    assert runner.threads == 3
    if backend == "onnx":  # and it reaches the runtime
        with runner:
            assert runner.session.get_session_options().intra_op_num_threads == 3
