"""coremltools, imported quietly with the extra that brings it named; a temp folder of its own for
each conversion; and the one error for a Core ML program the evaluator cannot run (not checkable
here, which is no fault of the program)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from vitexport.core.environment import quiet_loggers
from vitexport.core.errors import BackendUnavailable, NotCheckableHere

_REDIRECTED = threading.RLock()  # the temp folder is the whole process's: one conversion redirects it at a time


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


@contextmanager
def own_temp_folder() -> Iterator[None]:
    """Run a conversion with a temp folder of its own, removed when it ends. coremltools writes each
    model it converts or compresses as a package in the temp folder and removes it only when the
    process exits: a long run (optimize, matrix, a test session) piled them up, 331 MB each for ViT-B,
    and a killed one left them behind for good."""
    import torch._dynamo  # noqa: F401  torch fixes its compile cache under the temp folder on this import

    with _REDIRECTED:
        scratch = tempfile.mkdtemp(prefix="vitexport-coreml-")
        saved, tempfile.tempdir = tempfile.tempdir, scratch
        try:
            yield
        finally:
            tempfile.tempdir = saved
            shutil.rmtree(scratch, ignore_errors=True)


def unsupported(e: Exception) -> NotCheckableHere:
    """An op the evaluator lacks: the package is fine, but it cannot be checked here (off Apple
    devices); its deploy package's on-device check, or `vitexport verify` on a Mac, proves it."""
    return NotCheckableHere(f"{e}, so this program cannot be checked off macOS: check it on an Apple device")
