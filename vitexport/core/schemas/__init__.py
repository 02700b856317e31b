"""Schemas of everything vitexport reads back: each file kind is a versioned pydantic model, and
`check` validates a parsed file whole against it, after `vitexport.core.jsonfile` has bounded its size
and nesting. The first problem becomes one UsageError (exit 2) naming the file and the field path:
`report.json: results[3].verification.cosine_similarity: 1e+308 is not within [-1, 1]`.

The models (`fields`, `bench` with `profile`, `artifact`, `deploy`, `matrix`, `optimize`) import
pydantic, so they are imported only when a file is read: `vitexport --help` never loads them. `publish` writes their JSON Schemas
into the manual. May import only vitexport.core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError

# Each published schema: name -> (module under vitexport.core.schemas, model, what it describes).
SCHEMAS: dict[str, tuple[str, str, str]] = {
    "bench-report": ("bench", "BenchReport", "a bench report, a merged (`compare`) report or a matrix report"),
    "sidecar": ("artifact", "Sidecar", "the sidecar next to every artifact (schema 2)"),
    "sidecar-v1": ("artifact", "SidecarV1", "a sidecar of schema 1 (read, upgraded on read)"),
    "verify-result": ("artifact", "VerifyResult", "a `verify` or export `--json` result (`verify --baseline`)"),
    "package-manifest": ("deploy", "Manifest", "a deploy package's manifest.json"),
    "golden": ("deploy", "Golden", "a deploy package's golden/golden.json"),
    "device-report": ("deploy", "DeviceReport", "the report a package's check writes on the device"),
    "matrix-export-record": ("matrix", "ExportRecord", "a matrix cache record of one export"),
    "matrix-timing-record": ("matrix", "TimingRecord", "a matrix cache record of one timing"),
    "matrix-plan": ("matrix", "Plan", "a matrix plan (TOML, shown as the JSON it parses to)"),
    "optimize-build-record": ("optimize", "BuildRecord", "an optimize cache record of one built candidate"),
    "optimize-check-record": ("optimize", "CheckRecord", "an optimize cache record of one candidate's check"),
    "optimize-timing-record": ("optimize", "TimingRecord", "an optimize cache record of one timing"),
}


def model(name: str):
    """The pydantic model of the schema `name` (imports pydantic)."""
    import importlib

    module, cls, _ = SCHEMAS[name]
    return getattr(importlib.import_module(f"vitexport.core.schemas.{module}"), cls)


def check(name: str, data: Any, path: str | Path, *, error: type[UsageError] = UsageError) -> Any:
    """`data` (a parsed file) when it is valid against the schema `name`; else `error` naming `path`
    and the first field that is wrong. The data is returned as parsed, not converted."""
    from pydantic import ValidationError

    try:
        model(name).model_validate(data)
    except ValidationError as e:
        raise error(f"{path}: {first_problem(e, data)}") from None
    return data


def first_problem(e, data: Any) -> str:
    """The first error of a ValidationError as `field.path: what is wrong`."""
    from vitexport.core.schemas.messages import describe

    return describe(e.errors(include_url=False)[0], data)
