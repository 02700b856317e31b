"""Shared fixtures: the registries tests parametrize over, and small-model helpers."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ZOO_FILE = ROOT / "samples" / "models" / "zoo.py"


def _zoo_factories() -> list[str]:
    """Every `*_vit` factory in the zoo file, so a new entry is tested by default."""
    spec = importlib.util.spec_from_file_location("vitexport_test_zoo", ZOO_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted(n for n, f in inspect.getmembers(module, inspect.isfunction)
                  if n.endswith("_vit") and f.__module__ == module.__name__)


ZOO = _zoo_factories()


def zoo_spec(name: str) -> str:
    return f"{ZOO_FILE}:{name}"


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
