"""Running a matrix on this machine: every cell exported, verified and timed; a re-run redoes
nothing; a changed option redoes only its cells; a killed run resumes; a failed cell exits 4 after
the rest finished; `--ray local` gives the same cells and parity. Cache hits are counted, never timed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vitexport.bench.stored import load
from vitexport.cli.app import app
from vitexport.matrix.plan import load_plan
from vitexport.matrix.run import run
from vitexport.report.files import csv_records

ROOT = Path(__file__).resolve().parents[2]
PLAN = """
name = "two presets"

[bench]
batches = [1]
warmup_iters = 1
warmup_s = 0
iters = 5
roofline = false

[[models]]
config = "tiny"
set = { depth = 1 }

[[models]]
config = "small"
set = { depth = 1 }

[[targets]]
backend = "onnx"
precision = "fp32"

[[targets]]
backend = "onnx"
precision = "int8"
"""


def matrix_cli(plan: Path, out: Path, *args) -> tuple[int, dict, str]:
    result = CliRunner().invoke(app, ["matrix", str(plan), "--out", str(out), "--json", *map(str, args)])
    return result.exit_code, json.loads(result.stdout), result.stderr


def cells_by_id(merged: dict) -> dict[str, dict]:
    return {c["id"]: c for c in merged["matrix"]["cells"]}


def ran(merged: dict) -> tuple[int, int]:
    """(exports run, timings run) by this run, as opposed to taken from the cache."""
    cached = merged["matrix"]["cached"]
    return cached["exports_run"], cached["timings_run"]


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The plan run once from scratch through the CLI: (plan path, matrix folder, exit code, report, stderr).

    Once per test run, not per pytest-xdist worker (the run takes seconds): the first worker that asks
    runs it under a file lock, the others wait and read it. Read-only: a test that runs the matrix
    again copies the folder first (copy_of)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "matrix-run-first"
    done = folder / "result.json"
    with FileLock(str(folder) + ".lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that died mid-run left it
            folder.mkdir(parents=True)
            plan = folder / "plan.toml"
            plan.write_text(PLAN)
            code, merged, stderr = matrix_cli(plan, folder / "out")
            done.write_text(json.dumps({"code": code, "merged": merged, "stderr": stderr}))
    result = json.loads(done.read_text())
    return folder / "plan.toml", folder / "out", result["code"], result["merged"], result["stderr"]


def copy_of(out: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(out, tmp_path / "out"))


def test_every_cell_passes_and_is_timed(first):
    plan, out, code, merged, stderr = first
    assert code == 0, stderr
    cells = merged["matrix"]["cells"]
    assert len(cells) == 4 and {c["status"] for c in cells} == {"passed"}
    assert {(c["model"], c["precision"]) for c in cells} == {
        (m, p) for m in ("tiny-depth1", "small-depth1") for p in ("fp32", "int8")}
    for c in cells:
        assert c["parity"]["passed"] is True
        (row,) = c["timings"][0]["rows"]
        assert row["available"] and row["batch_size"] == 1 and row["p50_ms"] > 0
        assert (out / c["export"]["artifact"]).is_file()
    assert ran(merged) == (4, 4)
    # One line per finished cell, each with an ETA but the last.
    lines = [line for line in stderr.splitlines() if line.startswith("[")]
    assert len(lines) == 4 and all("ETA" in line for line in lines[:3]) and lines[3].startswith("[4/4]")
    # The merged report: per model, the fastest verified artifact on each device.
    assert {(f["model"], f["device"], f["batch"], f["candidates"]) for f in merged["matrix"]["fastest"]} == {
        ("tiny-depth1", "local", 1, 2), ("small-depth1", "local", 1, 2)}
    for ext in ("json", "csv", "md", "png", "html"):
        assert Path(merged["files"][ext]).is_file()
    assert len(csv_records(merged)) == 4
    assert len(load(out / "reports" / "local.json")["results"]) == 4  # `vitexport compare` reads it
    # The conditions of the device's four timing runs, in its report and in the matrix's JSON.
    (source,) = merged["sources"]
    assert source["conditions"] == load(out / "reports" / "local.json")["conditions"]
    assert source["conditions"]["runs"] == 4 and 0 <= source["conditions"]["disturbed_rounds"] <= \
        source["conditions"]["rounds"]
    assert "Fastest verified artifact" in Path(merged["files"]["md"]).read_text()


def test_every_file_the_matrix_writes_passes_its_schema(first):
    """What the matrix reads back on a later run (its cache records, the artifacts' sidecars) and what
    `report` and `compare` read (its report, the per-device reports) are files of their schemas."""
    from vitexport.core import schemas
    from vitexport.core.schemas import matrix as matrix_schemas

    plan, out, code, merged, stderr = first
    checked = {"bench-report": [out / "matrix-plan.json", *(out / "reports").glob("*.json")],
               "matrix-export-record": list((out / "cache").glob("export-*.json")),
               "matrix-timing-record": list((out / "cache").glob("timing-*.json")),
               "sidecar": list((out / "artifacts").glob("*/*.json"))}
    assert all(checked.values()), checked
    for name, files in checked.items():
        for path in files:
            schemas.check(name, json.loads(path.read_text()), path)
    import tomllib

    matrix_schemas.Plan.model_validate(tomllib.loads(plan.read_text()))


def test_a_rerun_takes_every_cell_from_the_cache(first, tmp_path):
    plan, out, _, before, _ = first
    out = copy_of(out, tmp_path)
    records = {p: p.stat().st_mtime_ns for p in (out / "cache").iterdir()}
    merged = run(load_plan(plan), out)
    assert ran(merged) == (0, 0)
    assert merged["matrix"]["cached"]["exports"] == 4 and merged["matrix"]["cached"]["timings"] == 4
    assert {p: p.stat().st_mtime_ns for p in (out / "cache").iterdir()} == records  # nothing rewritten
    now, then = cells_by_id(merged), cells_by_id(before)
    assert {k: v["timings"][0]["rows"][0]["p50_ms"] for k, v in now.items()} == \
           {k: v["timings"][0]["rows"][0]["p50_ms"] for k, v in then.items()}
    assert merged["matrix"]["exit_code"] == 0


def test_changing_one_option_redoes_only_its_cells(first, tmp_path):
    plan, out, *_ = first
    out = copy_of(out, tmp_path)
    changed = tmp_path / "plan.toml"
    changed.write_text(PLAN.replace('precision = "int8"', 'precision = "int8"\noptions = { per_channel = false }'))
    merged = run(load_plan(changed), out)
    assert ran(merged) == (2, 2)  # the two int8 exports and their timings
    for cell in merged["matrix"]["cells"]:
        redone = cell["precision"] == "int8"
        assert cell["export"]["cached"] is not redone and cell["timings"][0]["cached"] is not redone
        assert cell["status"] == "passed"


@pytest.mark.slow  # a Ray cluster and four exports and timings from scratch: ~20 s on two cores
def test_ray_local_gives_the_same_cells_and_parity(first, tmp_path):
    ray = pytest.importorskip("ray")
    from ray_cluster import one_at_a_time

    plan, _, _, here, _ = first
    with one_at_a_time():
        code, merged, stderr = matrix_cli(plan, tmp_path / "out", "--ray", "local")
    assert code == 0, stderr
    assert not ray.is_initialized()  # the cluster it started is stopped
    assert "Token authentication" not in stderr and "RAY_AUTH_MODE" not in stderr  # Ray's notices are not ours
    assert ran(merged) == (4, 4)  # run on Ray, not taken from anywhere
    on_ray, local = cells_by_id(merged), cells_by_id(here)
    assert on_ray.keys() == local.keys()
    for cell_id, cell in on_ray.items():
        assert cell["status"] == local[cell_id]["status"] == "passed"
        assert cell["export"]["node"] not in (None, "local") and cell["timings"][0]["node"] == cell["export"]["node"]
        ray_parity, local_parity = cell["parity"], local[cell_id]["parity"]
        assert ray_parity["passed"] and ray_parity["top1_agreement"] == local_parity["top1_agreement"]
        for metric in ("max_abs_error", "mean_abs_error", "cosine_similarity"):  # other threads, other sums
            assert ray_parity[metric] == pytest.approx(local_parity[metric], rel=0.05, abs=1e-6), metric
        (row,) = cell["timings"][0]["rows"]
        assert row["available"] and row["batch_size"] == 1 and row["p50_ms"] > 0
    assert {(f["model"], f["device"], f["batch"]) for f in merged["matrix"]["fastest"]} == \
           {(f["model"], f["device"], f["batch"]) for f in here["matrix"]["fastest"]}


def test_a_changed_artifact_is_exported_again(first, tmp_path):
    plan, out, *_ = first
    out = copy_of(out, tmp_path)
    cell = next(iter(cells_by_id(run(load_plan(plan), out)).values()))
    artifact = out / cell["export"]["artifact"]
    artifact.write_bytes(artifact.read_bytes()[:-1] + b"\0")
    merged = run(load_plan(plan), out)
    assert ran(merged)[0] == 1
    assert cells_by_id(merged)[cell["id"]]["export"]["cached"] is False


def test_devices_elsewhere_are_unavailable_here(first, tmp_path):
    plan, out, *_ = first
    out = copy_of(out, tmp_path)
    both = tmp_path / "both.toml"
    both.write_text(PLAN.replace("roofline = false", 'roofline = false\ndevices = ["local", "orin-nx"]'))
    merged = run(load_plan(both), out)
    statuses = {(c["device"], c["status"]) for c in merged["matrix"]["cells"]}
    assert statuses == {("local", "passed"), ("orin-nx", "unavailable")}
    assert ran(merged) == (0, 0) and merged["matrix"]["exit_code"] == 0
    reason = next(c["reason"] for c in merged["matrix"]["cells"] if c["device"] == "orin-nx")
    assert "device:orin-nx" in reason
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(PLAN.replace("roofline = false", 'roofline = false\ndevices = ["orin-nx"]'))
    code, merged, stderr = matrix_cli(elsewhere, out)
    assert code == 3 and "no cell could run here" in stderr


def test_a_failed_check_exits_4_after_the_rest(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace('[[models]]\nconfig = "small"\nset = { depth = 1 }',
                                 f'[[models]]\nmodel = "{ROOT / "tests" / "planted.py"}:active_dropout"').replace(
        '[[targets]]\nbackend = "onnx"\nprecision = "int8"\n', ""))
    code, merged, stderr = matrix_cli(plan, tmp_path / "out")
    assert code == 4, stderr
    status = {c["model"]: c for c in merged["matrix"]["cells"]}
    assert status["tiny-depth1"]["status"] == "passed" and status["tiny-depth1"]["timings"][0]["rows"]
    failed = status["planted-active_dropout"]
    assert failed["status"] == "failed" and failed["timings"][0]["rows"] == []
    assert "/failed/" in "/" + failed["export"]["artifact"]
    assert "1 cell(s) failed their check" in stderr
    code, merged, _ = matrix_cli(plan, tmp_path / "out")  # the failure is a result: kept, not redone
    assert code == 4 and ran(merged) == (0, 0)


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes in /proc")
def test_a_killed_run_resumes_without_redoing_finished_cells(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "vitexport", "matrix", str(plan), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    workers: set[int] = set()
    while len(list((out / "cache").glob("timing-*.json"))) < 2:  # two cells recorded: stop it there
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
        workers |= set(children_of(proc.pid))
        time.sleep(0.05)
    workers |= set(children_of(proc.pid))
    finished = {p.name for p in (out / "cache").iterdir()}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM; the cells that finished are kept" in proc.stderr.read()
    assert workers and not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    # Nothing half-written: no staging folders or temporary files anywhere in the matrix folder.
    leftovers = [p for p in out.rglob("*") if p.name.startswith(".vitexport-") or ".tmp" in p.name]
    assert leftovers == []
    merged = run(load_plan(plan), out)
    assert merged["matrix"]["exit_code"] == 0 and len(merged["matrix"]["cells"]) == 4
    cached_timings = {t["key"] for c in merged["matrix"]["cells"] for t in c["timings"] if t["cached"]}
    assert {f"timing-{k}.json" for k in cached_timings} >= {n for n in finished if n.startswith("timing-")}
    assert ran(merged)[1] == 4 - len([n for n in finished if n.startswith("timing-")])
