"""Reports turned hostile: each field of a real report replaced with markup that would run a script,
add an element or fetch something, were a page ever to print it as markup rather than as text.

A field is kept hostile when the reader accepts it so. A report reader may refuse one (bad input,
exit 2): the page is then never drawn, which is safe. A string field may be refused but must never
break the page; a number or a null that is given a string and breaks the page is the reader's to
type-check, and is left as it was.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable, Iterator

from vitexport.core.errors import UsageError

MARK = "PWNED"  # what a payload that ran would set the page's title to, with its number
Where = tuple  # a field's place in a report: its keys and list positions


def payload(n: int) -> str:
    """Markup that breaks out of an attribute, a <title> or a <style>, then tries every way to act:
    an image's error handler sets the title, a script adds an element, an SVG's load fetches."""
    return (f"</title></style></textarea>\"'><img src=x data-pwned=\"{n}\" onerror=\"document.title='{MARK} {n}'\">"
            f"<script>document.body.appendChild(document.createElement('pwned-{n}'))</script>"
            f"<svg data-pwned=\"{n}\" onload=\"fetch('/pwned/{n}')\"></svg>{MARK} {n}!")


def fields(value: Any, where: Where = ()) -> Iterator[tuple[Where, Any]]:
    """Every leaf of a parsed JSON value but a boolean, with its place: strings, numbers and nulls."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from fields(item, (*where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from fields(item, (*where, i))
    elif not isinstance(value, bool):
        yield where, value


def replaced(report: dict, changes: dict[Where, str]) -> dict:
    out = copy.deepcopy(report)
    for where, text in changes.items():
        node = out
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = text
    return out


def make_hostile(reports: list[dict], draw: Callable[[list[dict]], Any]) -> tuple[list[dict], dict[Where, int]]:
    """`reports` (of one shape: one report, or copies for a history) with every field the reader
    accepts replaced by a payload, and the number of each field's payload. `draw(reports)` reads
    them and renders their page."""
    numbered = {where: n for n, (where, _) in enumerate(fields(reports[0]))}
    strings = [w for w, value in fields(reports[0]) if isinstance(value, str)]
    others = [w for w, value in fields(reports[0]) if not isinstance(value, str)]

    def hostile(wheres: list[Where]) -> list[dict]:
        return [replaced(r, {w: payload(numbered[w]) for w in wheres}) for r in reports]

    def accepted(wheres: list[Where]) -> list[Where]:
        """The fields of `wheres` the reader takes as payloads, found by halving: most are taken, so
        this draws far fewer pages than one per field."""
        try:
            draw(hostile(wheres))
            return wheres
        except UsageError:
            pass  # refused as bad input
        except Exception as e:
            if len(wheres) == 1 and wheres[0] in strings:
                raise AssertionError(f"a string at {wheres[0]} breaks the page instead of being shown or refused: "
                                     f"{e!r}") from e
        if len(wheres) == 1:
            return []
        half = len(wheres) // 2
        return accepted(wheres[:half]) + accepted(wheres[half:])

    kept = accepted(strings) + accepted(others)
    return hostile(kept), {w: numbered[w] for w in kept}


def write(reports: list[dict], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"report-{i}.json" for i in range(len(reports))]
    for path, report in zip(paths, reports):
        path.write_text(json.dumps(report))
    return paths
