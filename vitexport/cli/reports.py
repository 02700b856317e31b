"""`vitexport report`: one HTML page from reports written earlier (a bench, compare or matrix
report, or several bench reports of one machine as its history; with device reports among them, one
comparison of them all, each device report judged against its package first)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vitexport.cli.options import INPUT, JsonOpt, Output, PackagesOpt
from vitexport.cli.running import handle_errors
from vitexport.core.words import count


@handle_errors
def report(reports: Annotated[list[Path], typer.Argument(
               help="Report JSON files: one bench, compare or matrix report, or several bench reports of one "
                    "machine (a history), or bench reports and device reports (device-report.json) side by side."),
               INPUT],
           out: Annotated[Optional[Path], typer.Option(
               "--out", "-o", help="Folder the output goes into, or the page itself (PAGE.html; default: beside the "
                                   "first report, REPORT.html; for several, REPORT-history.html)."),
               Output("file")] = None,
           packages: PackagesOpt = None,
           as_json: JsonOpt = False) -> None:
    """Render a self-contained HTML page (sortable tables, latency vs cosine charts, history) from reports."""
    from vitexport.deploy.joined import any_device_reports, loader
    from vitexport.report.html import page_from_files

    # Device reports among them: all are joined into one comparison, as `vitexport compare` joins them.
    result = page_from_files(reports, out, read=loader(packages or ()) if any_device_reports(reports) else None)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"wrote {result['html']} ({result['kind']} page, {count(result['rows'], 'row')}"
         + (f", {result['series']} history series" if result["series"] else "") + ")")
