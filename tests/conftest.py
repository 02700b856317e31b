"""Shared fixtures: the registries tests parametrize over, and small-model helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# pytest-xdist runs two workers on two cores: one BLAS/OpenMP thread each instead of two keeps them
# from oversubscribing the cores (the suite runs about a tenth faster). Set before torch is imported;
# tests of thread settings set their own, and bench workers set theirs explicitly.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"


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
