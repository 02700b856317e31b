"""A local matrix worker: `python -m vitexport.matrix.worker`, one JSON job per line on stdin
(`{"kind": "export" | "timing", "job": {...}}`), one JSON result per line on its stdout. It keeps
torch and the runtimes loaded between cells; the pool (vitexport.matrix.local) starts and ends it.

What exporters print goes to stderr (the pool's log), never into the result channel. Termination
signals end it like the CLI (staging folders removed, a bench's own worker killed); so does the
death of the pool's process, on Linux.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def child_environment() -> dict[str, str]:
    """The environment of a process the run starts: this very vitexport first on the path, and the
    run's process id, which `die_with_parent` checks."""
    from pathlib import Path

    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "VITEXPORT_MATRIX_PARENT": str(os.getpid())}


def die_with_parent() -> None:
    """Ask Linux to send SIGTERM when the pool's process dies, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(os.environ.get("VITEXPORT_MATRIX_PARENT", os.getppid())):
        os._exit(1)  # the parent died before the request took effect


def main() -> int:
    from vitexport.core.termination import Terminated, exit_code, signals_raise

    die_with_parent()
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # exporters and C++ libraries print to file descriptor 1
    try:
        with signals_raise():
            from vitexport.matrix import cells

            for line in sys.stdin:
                message = json.loads(line)
                result = cells.run(message["kind"], message["job"])
                results.write(json.dumps(result, default=str) + "\n")
                results.flush()
    except (KeyboardInterrupt, Terminated) as e:
        return exit_code(e)
    except BrokenPipeError:  # the pool is gone
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
