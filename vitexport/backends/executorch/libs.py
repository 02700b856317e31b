"""Importing ExecuTorch quietly, or saying which extra brings it.

Importing it logs a torch deprecation warning (from torchao), and the first XNNPACK load prints
CPU-probe lines from C++ straight to file descriptor 2; neither says anything to a user.
"""

from __future__ import annotations

import contextlib
import os
import sys

from vitexport.core.environment import quiet_loggers
from vitexport.core.errors import BackendUnavailable

INSTALL = "pip install 'vitexport[executorch]'"


def missing(e: ImportError) -> BackendUnavailable:
    return BackendUnavailable(f"{e.name or 'executorch'} is not installed: {INSTALL}")


def import_exir():
    """executorch.exir (export and lowering), or BackendUnavailable naming the extra."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # Core ML lowering draws progress bars over our output
    try:
        with quiet_loggers("torch.utils._pytree"):
            import executorch.exir as exir
    except ImportError as e:
        raise missing(e) from None
    return exir


def import_runtime():
    """ExecuTorch's runtime singleton, or BackendUnavailable naming the extra."""
    try:
        with quiet_loggers("torch.utils._pytree"):
            from executorch.runtime import Runtime
    except ImportError as e:
        raise missing(e) from None
    return Runtime.get()


@contextlib.contextmanager
def silenced_stderr():
    """File descriptor 2 to /dev/null for the block (C++ writes bypass sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
