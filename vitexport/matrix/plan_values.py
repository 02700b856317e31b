"""Reading the values of a matrix plan: each checked against the type it should have (TOML arrays
become tuples), its range and its shape, relative paths anchored at the plan's folder, and every
mistake a PlanError (exit 2) naming the file and the key, `targets[1].precision` (indices from 0).
The plan's sections and what they mean are vitexport.matrix.plan's."""

from __future__ import annotations

import math
import types
import typing
from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError


class PlanError(UsageError):
    """A plan that cannot run as written (exit 2)."""


class PlanValues:
    """Reads values out of one plan's tables; a PlanError names where a value is wrong."""

    def __init__(self, path: Path):
        self.path, self.base = path, path.resolve().parent

    def fail(self, key: str, message: str) -> PlanError:
        return PlanError(f"{self.path.name}: {key}: {message}")

    def coerce(self, value: Any, hint: Any, key: str) -> Any:
        """`value` checked against the type `hint` (int, float, str, bool, tuples, Optional, unions);
        TOML arrays become tuples."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            options = [a for a in args if a is not type(None)]
            if len(options) == 1:  # `int | None`: TOML has no null, so the value is the int
                return self.coerce(value, options[0], key)
            for candidate in options:  # the first alternative the value fits
                try:
                    return self.coerce(value, candidate, key)
                except PlanError:
                    continue
            raise self.fail(key, f"{value!r} should be {' or '.join(_type_name(a) for a in options)}")
        if origin is tuple:
            if not isinstance(value, list):
                raise self.fail(key, f"should be a list, not {_toml_type(value)}")
            item = args[0] if args else Any
            return tuple(self.coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
        if hint is Any:
            return value
        if hint is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(key, f"should be a number, not {_toml_type(value)}")
            if not math.isfinite(value):
                raise self.fail(key, f"should be a finite number, got {value}")
            return float(value)
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(key, f"should be an integer, not {_toml_type(value)}")
            return value
        if hint in (str, bool):
            if type(value) is not hint:
                raise self.fail(key, f"should be {_type_name(hint)}, not {_toml_type(value)}")
            return value
        raise self.fail(key, f"cannot be set from a plan (type {hint})")

    def known(self, doc: dict, keys: tuple[str, ...], prefix: str) -> None:
        for k in doc:
            if k not in keys:
                shown = k if k.isprintable() else repr(k)  # a control character must not break the line
                raise self.fail(f"{prefix}{shown}", f"unknown key (known here: {', '.join(keys)})")

    def mapping(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"should be a table, not {_toml_type(value)}")
        return value

    def table(self, doc: dict, name: str, prefix: str) -> dict:
        return self.mapping(doc.get(name, {}), prefix + name)

    def entries(self, doc: dict, name: str) -> list:
        value = doc.get(name)
        if value is None:
            raise self.fail(name, f"missing: give at least one [[{name}]] entry")
        if not isinstance(value, list) or not value:
            raise self.fail(name, f"should be an array of tables ([[{name}]] entries)")
        return value

    def typed(self, doc: dict, name: str, kind: type, prefix: str, **default) -> Any:
        if name not in doc:
            if "default" in default:
                return default["default"]
            raise self.fail(prefix + name, "missing")
        return self.item(doc[name], kind, prefix + name)

    def item(self, value: Any, kind: type, key: str) -> Any:
        if type(value) is not kind:
            raise self.fail(key, f"should be {_type_name(kind)}, not {_toml_type(value)}")
        return value

    def integer(self, doc: dict, name: str, prefix: str, default, *, minimum=None, maximum=None):
        if name not in doc:
            return default
        value = self.coerce(doc[name], int, prefix + name)
        self.bounds(value, prefix + name, minimum, maximum)
        return value

    def number(self, doc: dict, name: str, prefix: str, *, minimum=None, maximum=None) -> float | None:
        if name not in doc:
            return None
        value = self.coerce(doc[name], float, prefix + name)
        self.bounds(value, prefix + name, minimum, maximum)
        return value

    def int_list(self, doc: dict, name: str, prefix: str, default, *, minimum=None, maximum=None, distinct=True):
        """A list of integers; `distinct`: a value listed twice is a mistake (batch sizes), not a shape
        whose dimensions may repeat (an input of 1x3x224x224)."""
        if name not in doc:
            return default
        values = self.coerce(doc[name], tuple[int, ...], prefix + name)
        if not values:
            raise self.fail(prefix + name, "is empty")
        for i, v in enumerate(values):
            self.bounds(v, f"{prefix}{name}[{i}]", minimum, maximum)
        if distinct and len(set(values)) != len(values):
            raise self.fail(prefix + name, f"lists a value twice: {list(values)}")
        return values

    def bounds(self, value, key: str, minimum, maximum) -> None:
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be >= {minimum:g}, got {value:g}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be <= {maximum:g}, got {value:g}")

    def path_value(self, doc: dict, name: str, prefix: str, must: str) -> Path | None:
        if name not in doc:
            return None
        path = self.anchored(self.item(doc[name], str, prefix + name))
        if must == "dir" and not path.is_dir():
            raise self.fail(prefix + name, f"{path} is not a folder")
        if must == "file" and not path.is_file():
            raise self.fail(prefix + name, f"{path} is not a file")
        return path

    def anchored(self, text: str) -> Path:
        path = Path(text).expanduser()
        return (path if path.is_absolute() else self.base / path).resolve()


def _type_name(kind: Any) -> str:
    names = {str: "a string", bool: "true or false", int: "an integer", float: "a number", list: "a list",
             dict: "a table"}
    if typing.get_origin(kind) is tuple:
        return "a list"
    return names.get(kind, str(kind))


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__
