"""What every command does around its work: a library error becomes one line on stderr and the
contract's exit code, an interruption says what it left, stdout stays pure JSON under --json, and
progress goes to stderr (bars on a terminal, lines in a log, nothing with --quiet)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from typing import Annotated, Callable

import typer

from vitexport.core import chatter
from vitexport.core.errors import ExitCode, ParityError, RegressionError, VitexportError
from vitexport.core.termination import Terminated, by_signal
from vitexport.core.termination import exit_code as interrupted_exit_code
from vitexport.core.usercode import described

VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", help="Also show what libraries wrote to stderr (held back otherwise; or VITEXPORT_VERBOSE=1).")]

# What an interrupted command leaves, when it is not "nothing at the target path".
AFTER_INTERRUPTION = {"matrix": "the cells that finished are kept: run it again to resume"}


def handle_errors(fn: Callable) -> Callable:
    """Turn library exceptions into one line on stderr and the contract's exit code; hold back what
    libraries write to stderr while the command runs (every command gets `--verbose` to show it)."""
    from vitexport.report.console import escape, stderr_console

    @functools.wraps(fn)
    def wrapper(*args, verbose: bool = False, **kwargs):
        as_json = kwargs.get("as_json", False)
        try:
            with chatter.held_back(verbose or chatter.verbose_from_environment()):
                return fn(*args, **kwargs)
        except ParityError as e:
            from vitexport.report.terminal import emit, emit_optimize

            if e.result:
                (emit_optimize if "candidates" in e.result else emit)(e.result, as_json is True)
            stderr_console().print(f"[red]parity failed:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(ExitCode.PARITY)
        except RegressionError as e:  # the command has shown its result and the comparison
            stderr_console().print(f"[red]regression:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code)
        except VitexportError as e:
            stderr_console().print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code)
        except SystemExit as e:  # never vitexport's own (a command ends with typer.Exit): code it ran exited
            raise code_failed(e) from None
        except (KeyboardInterrupt, Terminated) as e:  # Ctrl-C, SIGTERM, SIGHUP...: cleanup has run
            if isinstance(e, KeyboardInterrupt) and not by_signal():  # raised by code it ran, not by Ctrl-C
                raise code_failed(e) from None
            kept = AFTER_INTERRUPTION.get(fn.__name__, "nothing was written at the target path")
            stopped = getattr(e, "cancelled", None)  # the work the command stopped, where it says (matrix)
            said(f"interrupted{f' by {e}' if isinstance(e, Terminated) else ''}; {kept}"
                 + (f"; {stopped}" if stopped else ""))
            raise typer.Exit(interrupted_exit_code(e))
        except BrokenPipeError:  # the reader went away (`| head -1`): the work stands, nothing more is shown
            quiet_stdout()
            raise typer.Exit(ExitCode.FAILURE)  # as rich exits when its tables meet a closed pipe
        except typer.Exit:
            raise
        except Exception as e:  # a bug, not bad input: one line unless asked for the traceback
            from vitexport.core.errors import out_of_memory
            from vitexport.core.writer import disk_error

            memory = out_of_memory(e)
            if memory:  # an allocation this machine could not make, where no estimate refused it first
                stderr_console().print(f"[red]error:[/red] {escape(memory)}; this machine is the limit",
                                       highlight=False, soft_wrap=True)
                raise typer.Exit(ExitCode.UNAVAILABLE)
            full = disk_error(e) if isinstance(e, OSError) else None
            if full:  # a full disk under a library's own writer (torch.save, say): the disk, not a bug
                stderr_console().print(f"[red]error:[/red] {escape(full)}", highlight=False, soft_wrap=True)
                raise typer.Exit(ExitCode.FAILURE)
            if os.environ.get("VITEXPORT_DEBUG"):
                raise
            stderr_console().print(f"[red]internal error:[/red] {type(e).__name__}: {escape(str(e))} "
                                   "(set VITEXPORT_DEBUG=1 for a traceback)", highlight=False, soft_wrap=True)
            raise typer.Exit(ExitCode.FAILURE)

    signature = inspect.signature(fn, eval_str=True)  # Typer reads a given signature as it stands
    verbose = inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=VerboseOpt)
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), verbose])
    return wrapper


def code_failed(e: BaseException) -> typer.Exit:
    """A SystemExit or KeyboardInterrupt that code the command ran raised (a model's forward pass while
    an exporter traces it), as an error naming it and its frame: never vitexport's own exit."""
    from vitexport.report.console import escape, stderr_console

    line = described("code the command ran (a model's forward pass, a library)", e)
    stderr_console().print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    return typer.Exit(ExitCode.FAILURE)


def said(line: str) -> None:
    """One line on stderr, which may already be gone (a closed terminal sends SIGHUP)."""
    try:
        stream = chatter.stderr()
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def progress_for(quiet: bool, machine_output: bool = False):
    """The command's progress reporter (a context manager): bars on a terminal, lines in a log,
    nothing with --quiet or JSON on stdout."""
    from vitexport.cli.progressbar import reporter

    return reporter(quiet=quiet, machine_output=machine_output)


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool):
    """Keep stdout pure JSON: exporters (and C++ libraries beneath them) print to file descriptor 1."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def quiet_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's last flush cannot fail again."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def reopen_closed_streams() -> list[str]:
    """Started with stdout or stderr closed (`>&-`, a daemon without streams), Python has no
    sys.stdout or sys.stderr, and every print and library beneath would fail. Put /dev/null there so
    the work runs and publishes as it would; return the names of the streams that were closed, so
    the command can say (where it still can) that its result was not shown, and exit non-zero."""
    closed = []
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, os.fdopen(fd, "w", buffering=1))  # a stream on /dev/null, not a file written
        closed.append(name)
    return closed


def writable_streams() -> None:
    """Any text a reader accepted can be printed: on a terminal whose encoding lacks a character (a
    label in Greek under LANG=C.ISO-8859-1), it is written escaped rather than ending the command."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")
