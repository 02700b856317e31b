"""The sample model zoo the tests parametrize over, importable by name from any test folder (a
module of its own: `conftest` is ambiguous once a subfolder has its own conftest.py)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

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
