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


def check_writable(stem: Path, inputs: Iterable[Path] = ()) -> None:
    """Refuse (exit 2) report files that would replace what vitexport did not write: anything but a
    regular file, one of this command's own inputs, or a set whose JSON is not a vitexport report."""
    from vitexport.core.jsonfile import read_json

    paths = report_paths(Path(stem))
    taken = {ext: p for ext, p in paths.items() if p.exists() or p.is_symlink()}
    if not taken:
        return
    for p in taken.values():
        if p.is_symlink() or not p.is_file():
            raise UsageError(f"{p} exists and is not a report file vitexport wrote; give another --out")
        for given in inputs:
            if Path(given).exists() and p.samefile(given):
                raise UsageError(f"{p} is one of the reports given; writing there would replace it: give another --out")
    owner = paths["json"]
    try:
        written = read_json(owner, "report") if owner in taken.values() else None
    except UsageError:
        written = None
    schema = written.get("schema") if isinstance(written, dict) else None
    if not (isinstance(schema, str) and schema.startswith("vitexport.")):
        names = ", ".join(str(p) for p in taken.values())
        raise UsageError(f"{names}: not written by vitexport (no vitexport report {owner.name} beside it); "
                         "give another --out")
