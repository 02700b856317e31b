"""Zip archives read within the sizes they declare: torch's checkpoints and export programs are zip
files whose entries torch stores uncompressed, so an entry that inflates many times over was not
written by torch (an archive bomb: a few megabytes that unzip to gigabytes), and contents larger than
this machine's memory cannot be read here. Both are refused before any entry is read (a read stops
at the declared size)."""

from __future__ import annotations

import zipfile

MAX_INFLATION = 20
SMALL = 2**20  # entries below this may be compressed as they like


def check_declared_sizes(archive: zipfile.ZipFile, what: str) -> None:
    """SourceError (exit 2) for an entry of `archive` that inflates more than MAX_INFLATION times,
    TooLargeHere (exit 3) when its contents exceed this machine's memory; `what` names the file."""
    from vitexport.core.environment import total_memory_bytes
    from vitexport.core.errors import SourceError, TooLargeHere

    total = 0
    for info in archive.infolist():
        total += info.file_size
        if info.file_size > SMALL and info.file_size > MAX_INFLATION * max(info.compress_size, 1):
            raise SourceError(f"{what}: its entry {info.filename.split('/', 1)[-1]} inflates "
                              f"{info.compress_size:,} bytes to {info.file_size:,}; torch stores its archives "
                              "uncompressed: refusing it")
    memory = total_memory_bytes()
    if memory is not None and total > memory:
        raise TooLargeHere(f"{what} holds {total / 1e9:.3g} GB; this machine has {memory / 1e9:.3g} GB")
