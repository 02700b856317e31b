"""A pydantic error in vitexport's words: the field's path as the file spells it (`rows[3].latency_ms.p50`)
and what is wrong with its value, on one line."""

from __future__ import annotations

from typing import Any

KINDS = {"float_type": "a number", "int_type": "a whole number", "string_type": "text", "bool_type": "true or false",
         "dict_type": "an object", "list_type": "a list", "model_type": "an object", "model_attributes_type": "an object",
         "int_from_float": "a whole number", "none_required": "null"}
MAX_SHOWN = 60


def describe(error: dict[str, Any], data: Any) -> str:
    where = field_path(error["loc"], data)
    value, kind = error.get("input"), error["type"]
    if kind == "missing":
        return f"{where or 'the file'}: is missing"
    prefix = f"{where}: " if where else ""
    if kind in KINDS:
        return f"{prefix}{shown(value)} is {json_kind(value)}, not {KINDS[kind]}"
    if kind == "finite_number":
        return f"{prefix}{shown(value)} is not a finite number"
    if kind == "literal_error":
        return f"{prefix}{shown(value)} is not one of {error['ctx']['expected']}"
    if kind == "extra_forbidden":
        return f"{where}: is not a known key"
    if kind == "range":
        return f"{prefix}{error['msg']}"
    message = error["msg"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        return f"{prefix}{message}"
    return f"{prefix}{shown(value)}: {message[0].lower() + message[1:]}"


def field_path(loc: tuple, data: Any) -> str:
    """`loc` walked through the data: keys and indices that exist in it; what pydantic adds for the
    member of a union it tried (`int`, `literal['batch']`, `function-after[...]`) is left out."""
    parts, here = [], data
    for step in loc:
        if isinstance(here, dict) and step in here:
            parts.append(_key(step, first=not parts))
            here = here[step]
        elif isinstance(here, list) and isinstance(step, int) and 0 <= step < len(here):
            parts.append(f"[{step}]")
            here = here[step]
        elif isinstance(here, dict) and isinstance(step, str) and not _tag(step):
            parts.append(_key(step, first=not parts))  # a missing key
            here = None
    return "".join(parts)


def _key(key, first: bool) -> str:
    """A key as a path step: `.name`, or `['odd key']` for one that is not plain printable text (a
    control character in a key must not break the message's line)."""
    text = str(key)
    if text and text.isprintable() and not any(c in text for c in ".[]'\" ") and len(text) <= MAX_SHOWN:
        return text if first else f".{text}"
    return f"[{shown(text)}]"


def _tag(step: str) -> bool:
    return "[" in step or step in ("int", "float", "str", "bool", "none", "list", "dict")


def shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def json_kind(value: Any) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)
