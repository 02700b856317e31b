"""A bench report read back from disk: `load` refuses anything that is not a report of this schema
(`bench --baseline REPORT` and `vitexport compare` read one), `is_merged` tells a report merged from
several machines, and `check_writable` reads what lies where report files are about to go, so that
only a report vitexport wrote is ever replaced.

A report is a dict (schema `SCHEMA`):
    {"schema", "model", "label", "fingerprint", "settings", "results": [row, ...], "roofline"}
with one row per backend x batch size.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from vitexport.core.errors import UsageError

SCHEMA = "vitexport.bench/1"

# The files of one report, side by side under one stem.
REPORT_SUFFIXES = ("json", "csv", "md", "png", "html")


def load(path: Path) -> dict:
    """Read a bench report, refusing anything that is not one (or is of another schema version): every
    field is checked against the report's schema (`vitexport.core.schemas.bench`), and any NaN or
    infinity, also in the parts the schema passes through, is refused."""
    from vitexport.core import schemas
    from vitexport.core.jsonfile import read_json

    report = read_json(Path(path), "bench report")
    schema = report.get("schema") if isinstance(report, dict) else None
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("vitexport.bench/"):
            raise UsageError(f"{path} is a {schema} report; this vitexport reads {SCHEMA}")
        raise UsageError(f"{path} is not a vitexport bench report (schema {schema!r})")
    schemas.check("bench-report", report, path)
    where = _non_finite(report, "")  # vitexport writes no NaN or infinity anywhere: none is data
    if where:
        raise UsageError(f"{path}: {where}")
    return report


def _non_finite(value: Any, where: str) -> str | None:
    """The first NaN or infinity in a parsed JSON value, named by its path; None when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'the report'} is {value!r}, not a number"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key)
        if found:
            return found
    return None


def is_merged(report: dict) -> bool:
    """Whether the report's rows come from several machines (`vitexport compare`): each names its own."""
    return any(r.get("device_label") for r in report.get("results", []))


def report_paths(stem: Path) -> dict[str, Path]:
    return {ext: stem.with_name(f"{stem.name}.{ext}") for ext in REPORT_SUFFIXES}


def set_is_ours(stem: Path):
    """Whether a file of the report set at `stem` is vitexport's: the set's JSON is a vitexport report."""
    from vitexport.core.writer import json_report_is_ours

    marker = report_paths(Path(stem))["json"]
    return lambda path: marker.is_file() and not marker.is_symlink() and json_report_is_ours(marker)


def check_writable(stem: Path, inputs: Iterable[Path] = (), flag: str = "--out") -> None:
    """Refuse (exit 2, before any work) report files that would replace what vitexport did not write:
    anything but a regular file, one of this command's own inputs, or a set whose JSON is not a
    vitexport report; or that cannot be written (a parent that is a file)."""
    from vitexport.core import writer

    for path in report_paths(Path(stem)).values():
        writer.check(path, ours=set_is_ours(stem), inputs=inputs, flag=flag)
