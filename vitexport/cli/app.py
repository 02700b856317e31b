"""The Typer app: every command registered in the order `vitexport --help` lists them (the export
commands from the backend registry first, then the others), and `main`, the console script.

The commands live beside it: exports.py (one per backend), inventory.py (configs, doctor),
artifacts.py (verify, package), timing.py (bench, optimize, compare, matrix), reports.py (report);
options.py declares the options they share and running.py maps what they raise to exit codes. Nothing
heavy is imported at module level, so `vitexport --help` answers at once.
"""

from __future__ import annotations

import sys

import typer

from vitexport.cli.artifacts import package, verify
from vitexport.cli.exports import add_export_commands
from vitexport.cli.inventory import configs, doctor
from vitexport.cli.reports import report
from vitexport.cli.running import reopen_closed_streams, said, writable_streams
from vitexport.cli.spellings import modernised
from vitexport.cli.timing import bench, compare, matrix, optimize
from vitexport.core.termination import Terminated, signals_raise
from vitexport.core.termination import exit_code as interrupted_exit_code

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Export Vision Transformers, prove the artifacts match PyTorch, and time each runtime.")

add_export_commands(app)
for command in (configs, verify, package, bench, optimize, compare, matrix, report, doctor):  # --help keeps this order
    app.command()(command)


def main() -> None:
    closed = reopen_closed_streams()
    writable_streams()
    argv, notices = modernised(sys.argv[1:])
    for notice in notices:
        said(notice)
    try:
        with signals_raise():
            app(argv, prog_name="vitexport")
    except SystemExit as e:
        if closed and e.code in (0, None):  # the work is done, but nobody saw its result
            said(f"vitexport: {' and '.join(closed)} closed: the command ran, its output was not shown")
            sys.exit(1)
        raise
    except (KeyboardInterrupt, Terminated) as e:  # outside a command's own handling (option parsing, shutdown)
        said("interrupted" + (f" by {e}" if isinstance(e, Terminated) else ""))
        sys.exit(interrupted_exit_code(e))


if __name__ == "__main__":
    sys.exit(main())
