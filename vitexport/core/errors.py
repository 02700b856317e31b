"""Exception hierarchy and exit codes.

The library raises these; only the CLI (``vitexport.cli``) turns them into a one-line message and an exit code.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # export or runtime error
    USAGE = 2  # bad usage or bad input
    UNAVAILABLE = 3  # backend not available on this machine
    PARITY = 4  # artifact does not match PyTorch
    REGRESSION = 5  # slower (bench) or less accurate (verify) than the --baseline beyond its margin


class VitexportError(Exception):
    """Base class: every error the CLI renders as one line."""

    exit_code = ExitCode.FAILURE


class UsageError(VitexportError):
    """The user asked for something impossible or gave bad input."""

    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """A model configuration that cannot be built (unknown preset, indivisible sizes, ...)."""


class SourceError(UsageError):
    """A model spec that cannot be resolved (missing file, bad factory, ...)."""


class WeightsError(UsageError):
    """A checkpoint that is missing, corrupt, unsafe or does not fit the model."""


class OutputError(UsageError):
    """The output location cannot be written."""


class WriteError(VitexportError):
    """Writing an output failed part way (a full disk, a quota, a read-only file system): nothing
    partial was left and the earlier file stays."""


class BackendUnavailable(VitexportError):
    """The backend's library or hardware is missing here."""

    exit_code = ExitCode.UNAVAILABLE


class UnsupportedByRuntime(BackendUnavailable):
    """The runtime cannot hold this model (an op it lacks, a limit such as Core ML's rank <= 5) and no
    rewrite applies: unavailable for that runtime (exit 3), never bad input; the message names the node."""


class NotCheckableHere(BackendUnavailable):
    """The artifact was built, but this machine cannot run it to check it (an op vitexport's Core ML
    evaluator lacks). An export publishes it marked not-checked-here; `verify` exits 3 with it."""


class MissingLibrary(BackendUnavailable):
    """An optional library (timm, transformers, Pillow, ...) is not installed here: unavailable (exit 3)
    like a backend's runtime, never bad input, with what to install."""


def import_optional(module: str, needed_by: str, extra: str | None = None):
    """`module`, or MissingLibrary saying who needs it and the `vitexport[extra]` that brings it."""
    import importlib

    from vitexport.core import termination

    try:
        with termination.held(f"loading {module}"):  # a Ctrl-C inside a library's import can be swallowed
            return importlib.import_module(module)
    except ImportError:
        how = f"pip install 'vitexport[{extra}]'" if extra else f"install the package that provides {module}"
        raise MissingLibrary(f"{needed_by} need {module}, which is not installed here: {how}") from None


class TooLargeHere(BackendUnavailable):
    """A well-formed model or input that needs more memory than this machine has: the machine is the
    limit (exit 3), refused before the allocation, naming what it needs and what there is. A file or
    argument that asks for an absurd amount (a typo, an archive bomb) is bad input instead (exit 2)."""


def out_of_memory(error: BaseException) -> str | None:
    """The allocator's refusal in one line, where `error` is one (MemoryError, torch's "can't allocate
    memory" or "out of memory"); None for any other error."""
    text = str(error)
    if isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and (
            "can't allocate memory" in text or "DefaultCPUAllocator" in text or "out of memory" in text.lower())):
        first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
        return f"out of memory: {first}"
    return None


class ExportError(VitexportError):
    """The exporter or converter failed."""


class RuntimeFailure(VitexportError):
    """Loading or running an artifact failed."""


class ParityError(VitexportError):
    """The artifact's outputs left tolerance; ``result`` holds the full report."""

    exit_code = ExitCode.PARITY

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result or {}


class ClusterLost(VitexportError):
    """The cluster a run was using went away under it (its head, or the connection to it). What had
    finished is kept; ``result`` holds the report of it, as ``--json`` prints it."""

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result


class RegressionError(VitexportError):
    """Worse than a baseline beyond the margin: slower rows in a bench, worse parity numbers in a
    verify. ``result`` holds the full result with its comparison, as ``--json`` prints it."""

    exit_code = ExitCode.REGRESSION

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result or {}


EXPLAINED_CHARS = 600
# Lines of a runtime's message that only say where in its own sources it threw.
_WHERE_ONLY = ("Exception from ", "Check 'false' failed at ")


def explained(error: BaseException, limit: int = EXPLAINED_CHARS, default: str | None = None) -> str:
    """A library's (or a user's) exception text on one line, whole when it fits: its lines joined by
    " | ", the ones that only name the library's own source file left out. Never just the first line
    (OpenVINO's says which of its files threw; the op it could not convert comes after); past `limit`
    characters, the first line and the last ones (where runtimes put the cause) are kept. `default`
    (the type's name unless given) when the text is empty."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(_WHERE_ONLY)] or lines
    if not useful:
        return type(error).__name__ if default is None else default
    text = " | ".join(useful)
    if len(text) <= limit:
        return text
    head, tail = useful[0][:limit // 3], []
    room = limit - len(head) - 5
    for line in reversed(useful[1:]):
        line = line if len(line) <= room else "…" + line[-(room - 1):]
        if room <= 0 or len(line) > room:
            break
        tail.insert(0, line)
        room -= len(line) + 3
    return " | ".join([head, "…", *tail])
