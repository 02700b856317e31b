"""Letting go of the pages of an artifact's files that a runtime has mapped and already copied.

A runtime that maps its weights from the artifact's files and repacks them into its own layout
(OpenVINO's CPU plugin repacks every MatMul weight while it compiles) keeps the file's pages in its
mapping although it never reads them again: a check that holds the runtime counts the weights twice
(ViT-H: 5 GB for 2.5 GB of weights). Those pages belong to the file, in a shared read-only mapping,
so taking them out of the mapping (madvise MADV_DONTNEED) loses nothing: they stay in the page
cache, and a later read maps them again. Done every INTERVAL while the runtime loads, so that the
copy and the mapped pages are never resident in full at once, and once more at the end.

Only this process's shared, read-only mappings of files inside the given folder are touched: a
private mapping could hold pages the process wrote, which dropping would lose. Linux only; elsewhere
nothing happens.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Iterator

MADV_DONTNEED = 4  # Linux's value, the same on every architecture
INTERVAL = 0.05  # seconds: a runtime copies a few hundred MB in that time at most
MAPS = Path("/proc/self/maps")


def file_mappings(folder: Path, maps: str) -> list[tuple[int, int]]:
    """(start, end) of each shared read-only mapping in `maps` (/proc/PID/maps text) of a file inside
    `folder`."""
    root = folder.resolve()
    found = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or "w" in parts[1] or parts[1][3:4] != "s":
            continue
        path = Path(parts[5].strip())
        if root in path.parents:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            found.append((start, end))
    return found


def release(folder: Path) -> int:
    """Take the pages of `folder`'s files out of this process's read-only mappings; the bytes of the
    mappings released (0 where /proc or madvise is not there)."""
    import ctypes

    try:
        maps = MAPS.read_text()
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    released = 0
    for start, end in file_mappings(folder, maps):
        if madvise(start, end - start, MADV_DONTNEED) == 0:  # fails only for a mapping gone meanwhile
            released += end - start
    return released


@contextlib.contextmanager
def released_while_loading(folder: Path) -> Iterator[None]:
    """Release `folder`'s mapped pages every INTERVAL while the block runs (a runtime loading an
    artifact: its load releases the GIL), and once after it."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(INTERVAL):
            release(folder)

    thread = threading.Thread(target=loop, name="vitexport-mapped-pages", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release(folder)
