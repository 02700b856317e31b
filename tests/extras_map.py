"""What pyproject.toml promises, as import names: the modules the core install brings, the modules
each extra brings, and every place in vitexport/ that imports a library with the check guarding it.
Read by tests/test_extras.py; the distributions' own metadata (in this environment) names the modules
each distribution installs and what it requires in turn."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vitexport"
EXTRA_IN_TEXT = re.compile(r"vitexport\[([A-Za-z0-9_-]+)\]")
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@cache
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def extras() -> dict[str, list[str]]:
    return project()["optional-dependencies"]


@cache
def _modules_of() -> dict[str, frozenset[str]]:
    """Distribution (canonical name) -> the top-level modules it installs."""
    out: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            out.setdefault(canonicalize_name(dist), set()).add(module)
    return {k: frozenset(v) for k, v in out.items()}


def _applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({**default_environment(), "extra": extra})


def _closure(requirements: list[str]) -> set[str]:
    """Canonical names of the distributions these requirements install, their requirements' too;
    `vitexport[...]` (an extra naming others) is followed through pyproject.toml."""
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if not _applies(req, extra):
            continue
        name = canonicalize_name(req.name)
        if name == "vitexport":
            todo += [(Requirement(r), "") for e in sorted(req.extras) for r in extras()[e]]
            continue
        for wanted in sorted(req.extras):  # a requirement's own extras bring more of its requirements
            todo += [(Requirement(r), wanted) for r in (_requires(name) or [])]
        if name in seen:
            continue
        seen.add(name)
        todo += [(Requirement(r), "") for r in (_requires(name) or [])]
    return seen


@cache
def _requires(dist: str) -> tuple[str, ...] | None:
    try:
        return tuple(metadata.requires(dist) or ())
    except metadata.PackageNotFoundError:
        return None


def modules(requirements: list[str]) -> set[str]:
    """The top-level modules that installing these requirements brings."""
    return {m for dist in _closure(requirements) for m in _modules_of().get(dist, ())}


@cache
def core_modules() -> frozenset[str]:
    """What the core install brings here, and the core's own requirements that apply elsewhere only
    (tomli below Python 3.11) by their import names."""
    direct = {canonicalize_name(Requirement(r).name).replace("-", "_") for r in project()["dependencies"]}
    return frozenset(modules(project()["dependencies"]) | direct)


# Extras installed apart from dev (pyproject.toml says why beside each): CI runs their tests in an
# environment of their own, with the command given here (.ci/run). Where an apart extra's distributions
# are not installed, the modules it brings are the ones listed, which its own environment's tests check
# against the installed metadata (tests/backends/test_litert.py).
APART: dict[str, tuple[str, frozenset[str]]] = {
    "litert": ("pytest tests/backends/test_litert.py", frozenset({"litert_torch", "ai_edge_litert", "ai_edge_quantizer"})),
}


@cache
def extra_modules(extra: str) -> frozenset[str]:
    found = frozenset(modules(extras()[extra]))
    return found or (APART[extra][1] if extra in APART else found)


def optional_modules() -> set[str]:
    """Modules some extra brings and the core does not: what a core install lacks."""
    return {m for e in extras() for m in extra_modules(e)} - core_modules()


@dataclass
class Site:
    """One import of a library by vitexport, and the extra its check names (None: no check found)."""

    where: str  # path:line
    module: str  # top-level name
    check: str  # how it is checked: "import_optional", "try", "backend", "shared", "door" or ""
    extra: str | None = None
    fallback: bool = False  # a try whose handler carries on without the library (no extra needed)


def python_files() -> list[Path]:
    # device/ folders hold the programs deploy packages carry to devices: data here, never imported.
    return sorted(p for p in PACKAGE.rglob("*.py") if "device" not in p.relative_to(PACKAGE).parts[:-1])


def dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _extras_named(node: ast.AST) -> set[str]:
    return {m for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            for m in EXTRA_IN_TEXT.findall(n.value)}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in IMPORT_ERRORS for t in types)


def _guarding_try(node: ast.AST, parents: dict) -> ast.Try | None:
    """The try (in the same function) whose body holds `node` and whose handler catches ImportError."""
    child, up = node, parents.get(node)
    while up is not None and not isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        if isinstance(up, ast.Try) and child in up.body and any(_catches_import_error(h) for h in up.handlers):
            return up
        child, up = up, parents.get(up)
    return None


def _literal_module(arg: ast.expr) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)  # f"transformers.models.{family}...": its package is literal
    return None


def _optional_call(call: ast.Call) -> tuple[str | None, str | None] | None:
    """(module, extra) of an `import_optional(module, needed_by, extra)` call, else None."""
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
    if name != "import_optional" or not call.args:
        return None
    extra = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "extra"), None)
    extra_name = extra.value if isinstance(extra, ast.Constant) else None
    return _literal_module(call.args[0]), extra_name


def raw_sites(path: Path) -> list[tuple[int, str, str, str | None, bool]]:
    """(line, module, check, extra, fallback) for each library this file imports, checks resolved locally."""
    tree = _tree(path)
    parents = _parents(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found = _optional_call(node)
            if found and found[0]:
                out.append((node.lineno, found[0].split(".")[0], "import_optional", found[1], False))
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "vitexport" or top == "__future__":
                continue
            guard = _guarding_try(node, parents)
            if guard is None:
                out.append((node.lineno, top, "", None, False))
                continue
            named = set().union(*(_extras_named(h) for h in guard.handlers if _catches_import_error(h)))
            raises = any(isinstance(n, ast.Raise) for h in guard.handlers for n in ast.walk(h))
            named = named or _extras_named(tree)  # a message kept beside the check (a constant, a helper)
            out.append((node.lineno, top, "try", min(named) if len(named) == 1 else None, not raises))
    return out


@cache
def backend_extras() -> dict[str, str | None]:
    """Backend plug-in package (dotted) -> the `extra` its Backend class declares (None: none)."""
    from vitexport import backends

    out = {}
    for module in backends.REGISTRY.values():
        init = ROOT / Path(*module.split(".")) / "__init__.py"
        if not init.exists():
            continue  # a one-file backend (the eager reference) imports only the core
        declared = [n.value.value for n in ast.walk(_tree(init))
                    if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "extra" for t in n.targets)
                    and isinstance(n.value, ast.Constant)]
        out[module] = declared[0] if declared else None
    return out


def plugin_of(module: str) -> str | None:
    return next((p for p in backend_extras() if module == p or module.startswith(p + ".")), None)


@cache
def importers() -> dict[str, set[str]]:
    """vitexport module -> the vitexport modules that import it (anywhere in their code)."""
    known = {dotted(p) for p in python_files()}
    out: dict[str, set[str]] = {}
    for path in python_files():
        me = dotted(path)
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vitexport"):
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("vitexport")]
            else:
                continue
            for target in targets:
                if target in known and target != me:
                    out.setdefault(target, set()).add(me)
    return out


def gates_above(module: str, seen: frozenset[str] = frozenset()) -> set[str | None] | None:
    """For shared backend code: the extras of the plug-ins that reach `module` through their imports
    (None among them: something outside the plug-ins reaches it, unchecked); None: nobody imports it."""
    callers = importers().get(module, set()) - seen
    if not callers:
        return None
    out: set[str | None] = set()
    for caller in callers:
        plugin = plugin_of(caller)
        if plugin:
            out.add(backend_extras()[plugin])
        elif caller.startswith("vitexport.backends.") and caller.count(".") >= 2:
            above = gates_above(caller, seen | {module})
            out |= above if above is not None else set()
        else:
            out.add(None)
    return out


def sites() -> list[Site]:
    """Every import of a library outside the core install, with the extra its check names."""
    core, result = core_modules(), []
    for path in python_files():
        me, rel = dotted(path), path.relative_to(ROOT)
        local = raw_sites(path)
        doors = {(m, e) for _, m, check, e, fallback in local if check and e}  # this module's checked doors
        for line, module, check, extra, fallback in local:
            if module in core:
                continue
            site = Site(f"{rel}:{line}", module, check, extra, fallback)
            plugin = plugin_of(me)
            if not check and plugin and backend_extras()[plugin]:
                site.check, site.extra = "backend", backend_extras()[plugin]
            elif check == "try" and extra is None and not fallback and plugin and backend_extras()[plugin]:
                site.extra = backend_extras()[plugin]  # its handler's helper words it (executorch's `missing`)
            elif not check and me.startswith("vitexport.backends.") and not plugin:
                gates = gates_above(me)
                if gates and None not in gates and len(gates) == 1:
                    site.check, site.extra = "shared", next(iter(gates))
                elif gates and None not in gates:  # several plug-ins: each one's extra must bring it
                    site.check, site.extra = "shared", ",".join(sorted(gates))
            if not site.check:
                door = sorted(e for m, e in doors if m == module)
                if door:  # the module's own entry checks it first (require_ray, import_coremltools, ...)
                    site.check, site.extra = "door", door[0]
            result.append(site)
    return result


def problem(site: Site) -> str | None:
    """Why this import could fail on an install without its extra, or None when it cannot."""
    if not site.check:
        return f"{site.where}: imports {site.module} with no check that names the extra bringing it"
    if site.fallback and site.extra is None:
        return None  # the handler carries on without the library
    if site.extra is None:
        return f"{site.where}: the check for {site.module} names no single `vitexport[EXTRA]`"
    for extra in site.extra.split(","):
        if extra not in extras():
            return f"{site.where}: the check for {site.module} names vitexport[{extra}], which pyproject.toml lacks"
        if site.module not in extra_modules(extra):
            return (f"{site.where}: the check for {site.module} names vitexport[{extra}], which does not "
                    f"install {site.module}")
    return None
