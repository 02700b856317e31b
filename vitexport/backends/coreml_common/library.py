"""coremltools, imported quietly with the extra that brings it named, and the one message for a Core ML
program the evaluator cannot run."""

from __future__ import annotations

import logging
import os
import warnings

from vitexport.core.environment import quiet_loggers
from vitexport.core.errors import BackendUnavailable, UsageError


def import_coremltools():
    logging.getLogger("coremltools").setLevel(logging.ERROR)  # it warns about every macOS-only proxy
    os.environ.setdefault("TQDM_DISABLE", "1")  # conversion progress bars would bury our own output
    try:
        # coremltools imports torchao where installed, which logs a torch deprecation on import.
        with warnings.catch_warnings(), quiet_loggers("torch.utils._pytree"):
            warnings.simplefilter("ignore")
            import coremltools as ct
    except ImportError:
        raise BackendUnavailable("coremltools is not installed: pip install 'vitexport[coreml]'") from None
    return ct


def unsupported(e: Exception) -> UsageError:
    """An op the evaluator lacks: the package cannot be checked off macOS (bad input for the check)."""
    return UsageError(f"cannot check this Core ML package off macOS: {e}; verify it on a Mac")
