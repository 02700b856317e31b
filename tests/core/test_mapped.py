"""Releasing the mapped pages of an artifact's files: only shared read-only mappings of files in the
folder are touched, their pages leave the process's resident set, and what they hold reads the same."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from vitexport.core import mapped

pytestmark = pytest.mark.skipif(not mapped.MAPS.exists(), reason="Linux /proc only")
SIZE = 16 * 1024 * 1024


def resident_of(path: Path, perms: str) -> int:
    """Bytes resident in this process of its mapping of `path` with permissions `perms` (/proc/self/smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[1] == perms and fields[5].strip() == str(path.resolve()):
            return int(next(e for e in lines[i + 1:] if e.startswith("Rss:")).split()[1]) * 1024
    raise AssertionError(f"no {perms} mapping of {path}")


def touch(view: mmap.mmap) -> int:
    return sum(view[i] for i in range(0, SIZE, 4096))


@pytest.fixture
def weights(tmp_path):
    folder = tmp_path / "artifact"
    folder.mkdir()
    path = folder / "model.bin"
    path.write_bytes(bytes(range(256)) * (SIZE // 256))
    return path


def test_only_shared_read_only_mappings_of_the_folders_files_are_named(tmp_path):
    inside, outside = tmp_path / "a" / "m.bin", tmp_path / "b" / "m.bin"
    maps = "\n".join([f"1000-3000 r--s 00000000 fe:00 1 {inside}",
                      f"3000-4000 r--p 00000000 fe:00 1 {inside}",  # private: could hold written pages
                      f"4000-5000 rw-s 00000000 fe:00 1 {inside}",  # writable
                      f"5000-6000 r--s 00000000 fe:00 2 {outside}",
                      "6000-7000 rw-p 00000000 00:00 0",
                      "7000-8000 r--s 00000000 00:00 0 [vvar]"])
    assert mapped.file_mappings(tmp_path / "a", maps) == [(0x1000, 0x3000)]


def test_released_pages_leave_the_resident_set_and_read_the_same(weights):
    with open(weights, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        before = touch(view)
        assert resident_of(weights, "r--s") >= SIZE * 0.9
        assert mapped.release(weights.parent) >= SIZE
        assert resident_of(weights, "r--s") <= SIZE * 0.1
        assert touch(view) == before


def test_other_folders_and_private_mappings_are_left_alone(weights, tmp_path):
    with open(weights, "r+b") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as private, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as shared:
        private[0:4] = b"mine"  # a page only this mapping holds
        touch(private), touch(shared)
        assert mapped.release(tmp_path / "elsewhere") == 0
        assert resident_of(weights, "r--s") >= SIZE * 0.9
        mapped.release(weights.parent)
        assert private[0:4] == b"mine" and resident_of(weights, "rw-p") >= SIZE * 0.9


def test_the_pages_a_load_mapped_are_released_when_it_ends(weights):
    with open(weights, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        with mapped.released_while_loading(weights.parent):
            touch(view)
        assert resident_of(weights, "r--s") <= SIZE * 0.1
