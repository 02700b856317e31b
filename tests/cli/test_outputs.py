"""Every place a command writes, found from the Typer app (the Output marker on its option), against
what must never be lost there: a user's file, one of the run's own inputs, a parent that is a file,
and a full disk. A new command's output is covered by default: it fails here until CASES says how
to run the command cheaply.

Each case runs the cheapest invocation of its command (a tiny model, fake bench workers, small
budgets); the full-disk cases run on a small tmpfs (mounted as root, skipped with the reason where
mount is refused)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from fake_workers import install
from typer.testing import CliRunner

from vitexport import backends
from vitexport.cli.app import app
from vitexport.cli.options import outputs

MODEL = ["--config", "tiny", "--set", "depth=1", "--set", "embed_dim=32", "--set", "num_heads=2"]
BENCH = ["bench", *MODEL, "--backend", "torch", "--batch", "1", "--no-roofline", "--budget-s", "0.5", "--quiet"]
REPORT_STEM = "bench-tiny"
PLAN = """
[bench]
batches = [1]
warmup_iters = 1
warmup_s = 0
iters = 2
roofline = false

[[models]]
config = "tiny"
set = { depth = 1, embed_dim = 32, num_heads = 2 }

[[targets]]
backend = "onnx"
precision = "fp32"
"""


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@dataclass
class Case:
    """How to run a command cheaply with its output at `where` (a folder, a file or a stem, as its
    Output marker says), and which file it writes there first."""

    args: Callable[[Path, "Given"], list]
    target: Callable[[Path], Path]
    # The same run with one of its inputs sitting at target(where), or None with the reason.
    with_input_there: Callable[[Path, "Given"], list] | str
    fake_bench: bool = False
    # Whether an earlier bench-schema report at target(where) is one the command may replace.
    replaces_bench_reports: bool = True
    # Folders under `where` the command keeps by design whatever happens (a matrix's worker logs).
    keeps: tuple[str, ...] = ()
    # The full-disk case takes over ~20 s (it then runs with the slow tests only).
    slow_on_full_disk: bool = False


@dataclass
class Given:
    """What the invocations read: a bench report, an artifact, a plan (made on demand)."""

    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    def report(self, path: Path | None = None) -> Path:
        """A bench report vitexport wrote (fake workers: no real timing)."""
        path = path or self.tmp / "given" / "r.json"
        install(self.monkeypatch)
        result = invoke(*BENCH, "--out", self.tmp / "given-out", "--json-path", path)
        assert result.exit_code == 0, result.stderr
        return path

    def artifact(self, folder: Path | None = None) -> Path:
        from vitexport import api
        from vitexport.models.sources import SourceSpec

        folder = folder or self.tmp / "given"
        spec = SourceSpec("tiny", overrides={"depth": 1, "embed_dim": 32, "num_heads": 2})
        return Path(api.export("onnx", spec, None, folder, name="art")["artifact"])

    def plan(self) -> Path:
        path = self.tmp / "given" / "p.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PLAN)
        return path


def export_case(name: str) -> Case:
    suffix = backends.get(name).suffix

    def with_weights_there(where: Path, given: Given) -> list:
        import torch

        from vitexport.models.sources import SourceSpec, load

        weights = where / f"out{suffix}"
        weights.parent.mkdir(parents=True, exist_ok=True)
        spec = SourceSpec("tiny", overrides={"depth": 1, "embed_dim": 32, "num_heads": 2})
        torch.save(load(spec).model.state_dict(), weights)
        return [name, *MODEL, "--weights", weights, "--name", "out", "--out", where, "--no-verify", "--force"]

    return Case(args=lambda where, given: [name, *MODEL, "--name", "out", "--out", where, "--no-verify", "--quiet"],
                target=lambda where: where / f"out{suffix}", with_input_there=with_weights_there,
                slow_on_full_disk=name == "executorch")  # ~40 s: lowering runs before the write fails


CASES: dict[tuple[str, str], Case] = {
    **{(be.name, "--out"): export_case(be.name) for be in backends.exporters()},
    ("bench", "--out"): Case(
        args=lambda where, given: [*BENCH, "--out", where],
        target=lambda where: where / f"{REPORT_STEM}.json",
        with_input_there=lambda where, given: [*BENCH, "--out", where, "--baseline",
                                               given.report(where / f"{REPORT_STEM}.json")],
        fake_bench=True),
    ("bench", "--json-path"): Case(  # the older `--json PATH`, still taken
        args=lambda where, given: [*BENCH, "--out", given.tmp / "bench-out", "--json-path", where],
        target=lambda where: where,
        with_input_there=lambda where, given: [*BENCH, "--out", given.tmp / "bench-out", "--json-path", where,
                                               "--baseline", given.report(where)],
        fake_bench=True),
    ("compare", "--out"): Case(
        args=lambda where, given: ["compare", given.report(), "--out", where],
        target=lambda where: where / "compare.json",
        with_input_there=lambda where, given: ["compare", given.report(where / "compare.json"), "--out", where]),
    ("report", "--out"): Case(
        args=lambda where, given: ["report", given.report(), "--out", where],
        target=lambda where: where,
        with_input_there=lambda where, given: ["report", given.report(where), "--out", where]),
    ("package", "--out"): Case(
        args=lambda where, given: ["package", given.artifact(), "--target", "linux", "--out", where, "--quiet"],
        target=lambda where: where / "art-onnx-linux",
        with_input_there=lambda where, given: ["package", given.artifact(), "--target", "linux", "--out", where,
                                               "--images", _folder(where / "art-onnx-linux"), "--quiet"]),
    ("optimize", "--out"): Case(
        args=lambda where, given: ["optimize", *MODEL, "--name", "best", "--out", where, "--budget-s", "0.2",
                                   "--quiet"],
        target=lambda where: where / "best.onnx",
        with_input_there=lambda where, given: ["optimize", *MODEL, "--name", "best", "--out", where,
                                               "--images", _folder(where / "best.onnx"), "--quiet"]),
    ("matrix", "--out"): Case(
        args=lambda where, given: ["matrix", given.plan(), "--out", where, "--quiet"],
        target=lambda where: where / "matrix-p.json",
        with_input_there="a matrix's reports are named after its plan (matrix-PLAN.*), which is TOML: "
                         "no input of the run can sit there",
        replaces_bench_reports=False, keeps=("logs",), slow_on_full_disk=True),  # ~22 s: worker processes
}


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


OUTPUTS = [(command, flag) for command, flag, _ in outputs(app)]


def test_every_output_option_has_a_case():
    """A command that writes somewhere is run by the cases below; a new one fails here until added."""
    assert OUTPUTS, "no output option found in the app: the Output markers are gone"
    missing = [f"{command} {flag}" for command, flag in OUTPUTS if (command, flag) not in CASES]
    assert not missing, f"give these outputs a cheap invocation in CASES: {', '.join(missing)}"


def test_every_path_parameter_says_whether_it_is_read_or_written():
    from vitexport.cli.options import path_params

    unmarked = [f"{info.name or info.callback.__name__} {flag}" for info in app.registered_commands
                for _, flag, marker in path_params(info.callback) if marker is None]
    assert not unmarked, f"mark these with Output(kind) or INPUT in vitexport/cli: {', '.join(unmarked)}"


def run_case(case: Case, args: list, monkeypatch):
    if case.fake_bench:
        install(monkeypatch)
    return invoke(*args)


def unavailable(result, command: str) -> None:
    if result.exit_code == 3:
        pytest.skip(f"{command} is unavailable here (exit 3 before any output is chosen)")


def refused(result, path: Path) -> None:
    """Exit 2 with one error line naming `path`, and no traceback."""
    text = result.stderr + result.stdout
    assert result.exit_code == 2, text
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0], result.stderr
    assert "Traceback" not in text and "internal error" not in text


def where_for(tmp_path: Path, command: str, flag: str) -> Path:
    marker = next(m for c, f, m in outputs(app) if (c, f) == (command, flag))
    return tmp_path / {"folder": "out", "file": "out/page.html" if command == "report" else "out/r.json",
                       "stem": "out/merged"}[marker.kind]


@pytest.mark.parametrize("command, flag", OUTPUTS)
def test_a_users_file_there_is_refused_and_kept(tmp_path, monkeypatch, command, flag):
    case = CASES[(command, flag)]
    given = Given(tmp_path, monkeypatch)
    where = where_for(tmp_path, command, flag)
    args = case.args(where, given)
    target = case.target(where)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("my notes")
    result = run_case(case, args, monkeypatch)
    unavailable(result, command)
    refused(result, target)
    assert target.read_text() == "my notes"


@pytest.mark.parametrize("command, flag", OUTPUTS)
def test_the_runs_own_input_there_is_refused_and_kept(tmp_path, monkeypatch, command, flag):
    case = CASES[(command, flag)]
    if isinstance(case.with_input_there, str):
        pytest.skip(case.with_input_there)
    where = where_for(tmp_path, command, flag)
    args = case.with_input_there(where, Given(tmp_path, monkeypatch))
    target = case.target(where)
    before = snapshot(target)
    result = run_case(case, args, monkeypatch)
    unavailable(result, command)
    refused(result, target)
    assert snapshot(target) == before


@pytest.mark.parametrize("command, flag", OUTPUTS)
def test_a_parent_that_is_a_file_is_refused(tmp_path, monkeypatch, command, flag):
    case = CASES[(command, flag)]
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    where = where_for(blocker, command, flag)
    result = run_case(case, case.args(where, Given(tmp_path, monkeypatch)), monkeypatch)
    unavailable(result, command)
    refused(result, blocker)
    assert blocker.read_text() == "not a folder"


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, unmounted afterwards; skipped where mounting is refused."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {getattr(e, 'stderr', b'') or e}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def fill(disk: Path) -> None:
    """Take every free byte of `disk`."""
    with open(disk / "filler", "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


@pytest.mark.parametrize("command, flag", [
    pytest.param(command, flag, marks=pytest.mark.slow) if CASES.get((command, flag)) and
    CASES[(command, flag)].slow_on_full_disk else (command, flag) for command, flag in OUTPUTS])
def test_a_full_disk_is_one_line_and_leaves_the_earlier_files(small_disk, tmp_path, monkeypatch, command, flag):
    case = CASES[(command, flag)]
    given = Given(tmp_path, monkeypatch)
    where = where_for(small_disk, command, flag)
    args = case.args(where, given)  # its inputs are made off the small disk
    target = case.target(where)
    target.parent.mkdir(parents=True, exist_ok=True)
    mine = target.suffix == ".json" and case.replaces_bench_reports
    earlier = target if mine else target.parent / "earlier.txt"
    if mine:  # an earlier report of vitexport's, which the failed run must not lose
        earlier.write_text(json.dumps({"schema": "vitexport.bench/1", "results": []}))
    else:
        earlier.write_text("kept")
    fill(small_disk)
    before = {p: snapshot(p) for p in small_disk.rglob("*") if p.name != "filler"}
    result = run_case(case, args, monkeypatch)
    unavailable(result, command)
    text = result.stderr + result.stdout
    assert result.exit_code not in (0, 2), text
    assert "Traceback" not in text and "internal error" not in text, text
    errors = [line for line in result.stderr.splitlines() if line.startswith(("error:", "parity failed:"))]
    assert len(errors) == 1, result.stderr
    kept = [where / name for name in case.keeps]
    after = {p: snapshot(p) for p in small_disk.rglob("*")
             if p.name != "filler" and not any(p.is_relative_to(k) for k in kept)}
    assert {p: s for p, s in after.items() if s != "folder"} == {p: s for p, s in before.items() if s != "folder"}


def snapshot(path: Path):
    if path.is_dir():
        return "folder"
    return path.read_bytes() if path.exists() else None
