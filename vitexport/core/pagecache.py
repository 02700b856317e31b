"""Dropping files from the kernel's page cache, so that the next load reads them from storage again:
a cold load, as after a reboot. Shared by bench (vitexport.bench.loadcost) and the device check of a
deploy package, which carries this file as it is: standard library only, Python 3.8 or newer."""
from __future__ import annotations

import os


def drop_cached(paths):
    """Ask the kernel to drop the files' pages from its page cache; True when it could be asked for
    every file (a page another process has mapped stays: the kernel drops what no one maps)."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return False
    dropped = True
    for path in paths:
        try:
            fd = os.open(str(path), os.O_RDONLY)
        except OSError:
            dropped = False
            continue
        try:
            fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            dropped = False
        finally:
            os.close(fd)
    return dropped
