"""The one writer: what it refuses before writing, and what a failure while writing leaves (the
earlier file, and nothing else). The commands' use of it is tested in tests/cli/test_outputs.py."""

import errno
import os

import pytest

from vitexport.core import writer
from vitexport.core.errors import ExitCode, OutputError, WriteError


def always(path):
    return True


def test_a_set_is_renamed_into_place_only_when_every_file_is_complete(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "a.png"
    writer.write_together({first: "one", second: b"\x89PNG"}, ours=always)
    assert first.read_text() == "one" and second.read_bytes() == b"\x89PNG"

    def broken(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError, match=f"cannot write {second}: No space left on device") as caught:
        writer.write_together({first: "two", second: broken}, ours=always)
    assert caught.value.exit_code == ExitCode.FAILURE
    assert first.read_text() == "one" and second.read_bytes() == b"\x89PNG"  # neither replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.png"]  # no temporary left


def test_a_full_disk_at_flush_is_one_error_and_no_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer.os, "fsync", full)
    with pytest.raises(WriteError, match="No space left on device"):
        writer.write(tmp_path / "r.json", "{}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("force", [False, True])
def test_an_input_is_never_replaced_even_forced(tmp_path, force):
    given = tmp_path / "given.json"
    given.write_text("input")
    with pytest.raises(OutputError, match="one of this run's inputs"):
        writer.write(given, "output", ours=always, inputs=[tmp_path / "." / "given.json"], force=force)
    assert given.read_text() == "input"


@pytest.mark.parametrize("make", [lambda p: p.write_text("mine"), lambda p: p.mkdir(),
                                  lambda p: p.symlink_to(p.with_name("elsewhere"))])
def test_what_vitexport_did_not_write_is_refused(tmp_path, make):
    target = tmp_path / "r.json"
    make(target)
    with pytest.raises(OutputError, match="not written by vitexport"):
        writer.write(target, "new", ours=always if target.is_dir() or target.is_symlink() else writer.nothing_is_ours)
    assert os.path.lexists(target)


def test_a_parent_that_is_a_file_is_named(tmp_path):
    (tmp_path / "notes").write_text("")
    with pytest.raises(OutputError, match=f"{tmp_path / 'notes'} is a file, not a folder") as caught:
        writer.check(tmp_path / "notes" / "deeper" / "r.json", flag="--json")
    assert caught.value.exit_code == ExitCode.USAGE and "--json" in str(caught.value)


def test_a_report_of_vitexport_is_recognised(tmp_path):
    ours, theirs = tmp_path / "ours.json", tmp_path / "theirs.json"
    ours.write_text('{"schema": "vitexport.bench/1"}')
    theirs.write_text('{"schema": "something/1"}')
    assert writer.json_report_is_ours(ours) and not writer.json_report_is_ours(theirs)
    writer.write(ours, "{}", ours=writer.json_report_is_ours)  # its own report is replaced
    with pytest.raises(OutputError):
        writer.write(theirs, "{}", ours=writer.json_report_is_ours)
