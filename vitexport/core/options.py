"""Typed options: a backend declares each flag once (default, help, allowed values, range), and
the CLI, the validation and the sidecar all read that one declaration.

    @dataclass(frozen=True)
    class CoreMLOptions(ExportOptions):
        target: str = option("iOS17", "Minimum deployment target.", choices=TARGETS)

The CLI turns every field into `--target` (with the choices in its help), `validate()` refuses a
value outside the choices or the range with a message naming the flag, and the sidecar records
`asdict(options)`. Nothing reads an options dict by string key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from vitexport.core.errors import UsageError


def option(default: Any, help: str, *, choices: tuple = (), minimum: float | None = None,
           maximum: float | None = None, flag: str | None = None, cli: bool = True, fold_case: bool = False):
    """A dataclass field with what the CLI and `check_fields` need to know about it.

    `choices`: allowed values (for a tuple field, allowed items); `fold_case`: compare them
    case-insensitively (`sm86` for `SM86`); `minimum`/`maximum`: inclusive numeric range (for a
    tuple field, of every item); `cli=False`: set by the API or another flag, not a flag itself."""
    meta = {"help": help, "choices": tuple(choices), "minimum": minimum, "maximum": maximum, "flag": flag,
            "cli": cli, "fold_case": fold_case}
    return dataclasses.field(default=default, metadata=meta)


def flag_of(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def help_of(f: dataclasses.Field) -> str:
    """The field's help with its allowed values appended, so help text never copies a constant."""
    text = f.metadata.get("help", "")
    choices = f.metadata.get("choices")
    return f"{text} One of: {', '.join(map(str, choices))}." if choices else text


def parse_list(text: str | None, item: Callable[[str], Any], flag: str) -> tuple:
    """'1,4,8' -> (1, 4, 8): the one parser of comma-separated flags (batch sizes, GPU targets, ...)."""
    if text is None or not str(text).strip():
        return ()
    parts = [p.strip() for p in str(text).split(",")]
    if any(not p for p in parts):
        raise UsageError(f"{flag} expects comma-separated values like 1,4,8, got {text!r}")
    try:
        return tuple(item(p) for p in parts)
    except ValueError:
        kind = "integers" if item is int else "values"
        raise UsageError(f"{flag} expects comma-separated {kind}, got {text!r}") from None


def check_number(value: Any, flag: str, *, minimum: float | None = None, maximum: float | None = None) -> None:
    """Finite and within [minimum, maximum]; NaN and infinity are bad input, not a tolerance."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{flag} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{flag} must be a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise UsageError(f"{flag} must be >= {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise UsageError(f"{flag} must be <= {maximum:g}, got {value:g}")


def check_fields(obj: Any) -> None:
    """Every declared choice and range of a dataclass instance; the first violation raises UsageError."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        flag, meta = flag_of(f), f.metadata
        items = value if isinstance(value, tuple) else (value,)
        choices = meta.get("choices") or ()
        if choices:
            fold = (lambda v: str(v).upper()) if meta.get("fold_case") else (lambda v: v)
            allowed = {fold(c) for c in choices}
            bad = [v for v in items if fold(v) not in allowed]
            if bad:
                raise UsageError(f"{flag} must be one of {', '.join(map(str, choices))}, got "
                                 f"{', '.join(map(repr, bad))}")
        if meta.get("minimum") is not None or meta.get("maximum") is not None:
            for v in items:
                check_number(v, flag, minimum=meta.get("minimum"), maximum=meta.get("maximum"))
        elif isinstance(value, float):
            check_number(value, flag)
