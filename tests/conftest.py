"""Shared fixtures: the registries tests parametrize over, and small-model helpers."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest
from durations import Durations
from shared_artifacts import SharedArtifacts

# pytest-xdist runs two workers on two cores: one BLAS/OpenMP thread each instead of two keeps them
# from oversubscribing the cores (the suite runs about a tenth faster). Set before torch is imported;
# tests of thread settings set their own, and bench workers set theirs explicitly.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


_modules_when_frozen = 0


@pytest.fixture(autouse=True)
def _imported_libraries_out_of_the_collectors_way():
    """Once a test has imported a library of note (torch, transformers, coremltools, ExecuTorch,
    OpenVINO: hundreds of modules), its objects are frozen out of the garbage collector's walks. Every
    export's check collects garbage (vitexport.models.holding.release) and Python collects every
    generation on its own as objects pile up; with those libraries imported one collection walks some
    650,000 objects (0.45 s): a fifth of the export tests' time before this (docs/contributing/
    testing.md). Frozen between tests, when only the session's and the module's fixtures are alive,
    so no test's own garbage is kept."""
    global _modules_when_frozen
    if len(sys.modules) - _modules_when_frozen >= 200:
        gc.collect()
        gc.freeze()
        _modules_when_frozen = len(sys.modules)
    yield


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"


@pytest.fixture(scope="session")
def shared_artifacts(tmp_path_factory) -> SharedArtifacts:
    """Exports many tests read, made once per run for every worker (tests/shared_artifacts.py)."""
    base = tmp_path_factory.getbasetemp()
    # Under pytest-xdist each worker's folder sits in the run's own: the workers share that one.
    return SharedArtifacts((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-artifacts")


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory):
    """hf_dir(architecture) -> the folder of its tiny model (tests/hf_tiny.py), built once per session."""
    pytest.importorskip("transformers")
    from hf_tiny import save_tiny

    made: dict[str, Path] = {}

    def get(architecture: str) -> Path:
        if architecture not in made:
            made[architecture] = save_tiny(architecture, tmp_path_factory.mktemp(architecture))
        return made[architecture]

    return get


_durations = Durations()


def pytest_runtest_logreport(report):
    _durations.add(report.nodeid, report.duration)


def pytest_terminal_summary(terminalreporter):
    """Where the time went, per folder, file and backend (tests/durations.py): information, never a gate."""
    from vitexport.backends import REGISTRY

    if _durations.seconds:
        terminalreporter.write_sep("=", "time per folder, file and backend")
        # The eager reference ("torch") runs in nearly every test: only the exporting backends are told apart.
        for line in _durations.lines(backends=[name for name in REGISTRY if name != "torch"]):
            terminalreporter.write_line(line)
