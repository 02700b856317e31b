"""The package's shape, kept true by test: rooms by stage of the flow, a layer rule, no import
circles, small modules, and a docstring at the door of every room saying its job and what it may
import. Imports inside functions count; those under `if TYPE_CHECKING:` do not (they never run)."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitexport"
MAX_LOOSE_MODULES = 10
MAX_MODULE_LINES = 500

# Lower layers never import higher ones. The backend spec (the registry and base.py, plus helpers
# shared by several backends) sits low so every stage can name backends; the backend plug-ins
# (one package each) sit high, loaded by name through the registry, so they may use every stage.
LAYERS = ["core", "models", "verify", "backend spec", "export", "bench", "report", "tools", "backend plug-ins",
          "api", "cli"]
TOOLS = {"deploy", "matrix", "optimize", "doctor"}


@lru_cache(maxsize=None)
def registered() -> frozenset[str]:
    """The backend plug-ins: every module the registry names (`vitexport.backends.onnx`, ...)."""
    from vitexport.backends import REGISTRY

    return frozenset(REGISTRY.values())


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "device" not in p.relative_to(PACKAGE).parts}


def plugin_of(name: str) -> str | None:
    """The backend plug-in a module belongs to (`vitexport.backends.onnx.export` -> the ONNX one), if
    any. Everything else in backends/ (the registry, base.py, code several backends share) is the spec."""
    for plugin in registered():
        if name == plugin or name.startswith(plugin + "."):
            return plugin
    return None


def layer(name: str) -> str:
    if plugin_of(name):
        return "backend plug-ins"
    if name == "vitexport.backends" or name.startswith("vitexport.backends."):
        return "backend spec"
    room = name.split(".")[1] if "." in name else "api"  # the package's own __init__ re-exports the API
    if room in TOOLS:
        return "tools"
    if room == "__main__":
        return "cli"
    return room


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


@lru_cache(maxsize=None)
def imports_of(name: str) -> frozenset[str]:
    """The vitexport modules `name` imports at run time, wherever the import statement stands."""
    path = modules()[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped, found = _type_checking_only(tree), set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base for a in node.names]
        for target in targets:
            while target and target not in modules():
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return frozenset(found)


def edges() -> list[tuple[str, str]]:
    return [(a, b) for a in modules() for b in sorted(imports_of(a))]


def test_the_rooms_are_few_and_the_modules_small():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, f"{len(loose)} modules loose in vitexport/: {loose}"
    big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


@pytest.mark.parametrize("room", sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py")))
def test_every_room_says_its_job_and_what_it_may_import(room):
    doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
    assert len(doc.split()) >= 12, f"vitexport/{room}/__init__.py needs a docstring saying its job"
    assert "import" in doc.lower(), f"vitexport/{room}/__init__.py should say which parts it may import"


def test_lower_layers_never_import_higher_ones():
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = [f"{a} ({layer(a)}) imports {b} ({layer(b)})" for a, b in edges() if rank[layer(a)] < rank[layer(b)]]
    assert not wrong, "\n".join(wrong)


def test_a_backend_never_imports_another_backend_or_the_cli():
    wrong = []
    for a, b in edges():
        mine, theirs = plugin_of(a), plugin_of(b)
        if mine and ((theirs and theirs != mine) or layer(b) in ("cli", "api")):
            wrong.append(f"{a} imports {b}")
    assert not wrong, "\n".join(wrong)


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in imports_of(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in modules():
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert cycles() == []


def test_the_checker_sees_imports_inside_functions_and_skips_type_checking(tmp_path, monkeypatch):
    """The rules above are only as good as the import reader: it must see a lazy import and must
    not count one that never runs."""
    assert "vitexport.verify.reference" in imports_of("vitexport.verify.checks")  # imported inside run_checks
    assert "vitexport.backends.base" not in imports_of("vitexport.verify.checks")  # TYPE_CHECKING only
