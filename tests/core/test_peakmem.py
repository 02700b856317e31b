"""Peak resident memory: a stage's peak sees what it allocated, an inner stage does not hide an outer
one's peak, and a command's peak is the sum over its processes (not the largest one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vitexport.core import peakmem
from vitexport.core.peakmem import Stage, TreePeak

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc only")
MB = 1_000_000


def touched(n: int) -> bytearray:
    block = bytearray(n)  # zero pages are not resident until written: write one byte per page
    block[::4096] = b"\1" * len(block[::4096])
    return block


def test_a_stage_sees_what_it_allocated():
    before = peakmem.resident().total
    with Stage() as stage:
        block = touched(200 * MB)
        del block
    assert stage.peak.bytes >= before + 190 * MB
    assert stage.record()["peak_rss_mb"] >= (before + 190 * MB) / MB


INNER = """
import json
from vitexport.core import peakmem
from vitexport.core.peakmem import Stage
before = peakmem.resident().total
with Stage() as outer:
    block = bytearray(200_000_000)
    block[::4096] = b"\\1" * len(block[::4096])
    del block
    with Stage() as inner:  # starts the kernel's peak again, below the outer's
        pass
print(json.dumps([before, inner.peak.bytes, outer.peak.bytes]))
"""


def test_an_inner_stage_keeps_the_outer_peak():
    """In a fresh interpreter: whether a freed block goes back to the system depends on the allocator's
    settings, which a library imported earlier in the same process may have changed."""
    import json

    run = subprocess.run([sys.executable, "-c", INNER], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    before, inner, outer = json.loads(run.stdout)
    assert inner < before + 150 * MB
    assert outer >= before + 190 * MB


def test_a_command_peak_is_summed_over_its_processes():
    hold = "import time; b = bytearray(150_000_000); b[::4096] = b'\\1' * len(b[::4096]); time.sleep(1.5)"
    parent = (f"import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', {hold!r}]) for _ in range(2)]; "
              "[p.wait() for p in ps]")
    proc = subprocess.Popen([sys.executable, "-c", parent])
    with TreePeak(proc.pid) as peak:
        proc.wait()
    assert proc.returncode == 0
    assert peak.bytes >= 300 * MB  # both children at once: more than either one alone


def test_a_forked_child_does_not_count_its_parents_pages_again():
    # A 300 MB process forks a child that shares every page until it would exec: the tree holds 300 MB,
    # not the 600 MB its two resident sets add up to.
    code = ("import os, time; b = bytearray(300_000_000); b[::4096] = b'\\1' * len(b[::4096]); pid = os.fork()\n"
            "if pid == 0: time.sleep(1.5); os._exit(0)\n"
            "os.waitpid(pid, 0)")
    proc = subprocess.Popen([sys.executable, "-c", code])
    with TreePeak(proc.pid) as peak:
        proc.wait()
    assert proc.returncode == 0
    assert 300 * MB <= peak.bytes < 450 * MB


def test_a_process_gone_reads_as_none():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert peakmem.resident(proc.pid) is None
