"""`vitexport report`: one HTML page from reports written earlier (a bench, compare or matrix
report, or several bench reports of one machine as its history)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vitexport.cli.options import INPUT, JsonOpt, Output
from vitexport.cli.running import handle_errors
from vitexport.core.words import count


@handle_errors
def report(reports: Annotated[list[Path], typer.Argument(
               help="Report JSON files: one bench, compare or matrix report, or several bench reports of one "
                    "machine (a history)."), INPUT],
           out: Annotated[Optional[Path], typer.Option(
               "--out", "-o", help="Folder the output goes into, or the page itself (PAGE.html; default: beside the "
                                   "first report, REPORT.html; for several, REPORT-history.html)."),
               Output("file")] = None,
           as_json: JsonOpt = False) -> None:
    """Render a self-contained HTML page (sortable tables, latency vs cosine charts, history) from reports."""
    from vitexport.report.html import page_from_files

    result = page_from_files(reports, out)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"wrote {result['html']} ({result['kind']} page, {count(result['rows'], 'row')}"
         + (f", {result['series']} history series" if result["series"] else "") + ")")
