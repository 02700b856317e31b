"""Writes the JSON Schema of every file vitexport reads back into the manual (docs/reference/schemas/NAME.json):

    python -m vitexport.core.schemas.publish            # into docs/reference/schemas of this checkout
    python -m vitexport.core.schemas.publish DIR        # elsewhere

tests/core/test_schemas.py fails when the published files differ from what this writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vitexport.core.schemas import SCHEMAS, model

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def json_schema(name: str) -> dict:
    """The JSON Schema of `name`, as published (keys in the order the model declares them)."""
    schema = model(name).model_json_schema(by_alias=True, mode="validation")
    return {"$schema": DRAFT, "$id": f"{name}.json", **schema}


def rendered(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False) + "\n"


def publish(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCHEMAS:
        path = folder / f"{name}.json"
        path.write_text(rendered(name), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> None:
    folder = Path(argv[0]) if argv else Path(__file__).resolve().parents[3] / "docs" / "reference" / "schemas"
    for path in publish(folder):
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
