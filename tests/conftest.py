"""Shared fixtures: the registries tests parametrize over, and small-model helpers."""

from __future__ import annotations

from pathlib import Path

import pytest


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
