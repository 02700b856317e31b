"""The round trip on this machine, end to end: `vitexport package --target linux` of `--config tiny`
(ONNX; one block at 32x32, the deploy tests' shared export: the round trip, not the model, is under
test), the package copied elsewhere and its check run by the Python of a fresh venv that holds only
numpy and onnxruntime (no vitexport, no torch: asserted), the report it writes compared with a
`vitexport bench --json` report of the same artifact, `vitexport report` on the same files, and the
page opened in Chromium with both rows. A report whose outputs were tampered with shows its row as
failed, never as a speed.

The venv is built once per session (`python -m venv --without-pip`, then this Python's pip with the
machine's package index or cache, no bytecode compiled: about 3 s here); where numpy and onnxruntime
cannot be installed, or no browser is installed, the tests skip and say why (VITEXPORT_REQUIRE_BROWSER
turns the browser's skip into a failure)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from headless_chromium import chromium
from device_harness import copy_to_device
from typer.testing import CliRunner

from vitexport.cli.app import app

pytestmark = pytest.mark.slow

ONLY = ("numpy", "onnxruntime")


def bare_env() -> dict:
    """The environment without anything that would let the venv's Python see vitexport or this venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="session")
def device_python(tmp_path_factory) -> Path:
    """The Python of a fresh venv with only numpy and onnxruntime installed."""
    venv = tmp_path_factory.mktemp("device-venv") / "venv"
    # This Python's pip installs into a venv made without one (pip >= 22.3: --python), unless it has
    # none: the venv's own pip then, seeded by ensurepip (seconds more). Either way it holds only ONLY.
    outside = importlib.util.find_spec("pip") is not None and \
        tuple(int(p) for p in importlib.metadata.version("pip").split(".")[:2]) >= (22, 3)
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if outside else []), str(venv)], check=True,
                   timeout=300, env=bare_env())
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)] if outside else [str(python), "-m", "pip"]
    r = subprocess.run([*pip, "install", "--disable-pip-version-check", "--no-compile", "-q", *ONLY],
                       capture_output=True, text=True, timeout=600, env=bare_env())
    if r.returncode:
        pytest.skip(f"numpy and onnxruntime cannot be installed into a fresh venv here: "
                    f"{(r.stderr.strip().splitlines() or ['pip failed'])[-1]}")
    return python


@pytest.fixture(scope="module")
def round_trip(device_python, exported, tmp_path_factory) -> dict:
    """Package, check on the 'device' (a copy, a bare venv), bench the same artifact; the paths. The
    artifact is the deploy tests' shared export (read-only: nothing here writes beside it)."""
    where = tmp_path_factory.mktemp("round-trip")
    cli = CliRunner()
    artifact = str(exported("onnx"))
    r = cli.invoke(app, ["package", artifact, "--target", "linux", "--out", str(where / "packages"), "--json"])
    assert r.exit_code == 0, r.output
    device = copy_to_device(Path(json.loads(r.stdout)["package"]), where)
    # There is no vitexport and no torch where the check runs; numpy and the runtime are all it has.
    probe = ("import importlib.util as u; print([m for m in ('vitexport', 'torch', 'numpy', 'onnxruntime') "
             "if u.find_spec(m)])")
    seen = subprocess.run([str(device_python), "-c", probe], cwd=device, capture_output=True, text=True,
                          env=bare_env(), timeout=120)
    assert seen.returncode == 0 and json.loads(seen.stdout.replace("'", '"')) == list(ONLY), seen.stdout + seen.stderr
    start = time.perf_counter()
    # Timed by budget, in rounds, as by default; a quarter second per case (eight rounds, the
    # fewest), not a device's three.
    checked = subprocess.run([str(device_python), "check.py", "--budget-s", "0.25"], cwd=device, capture_output=True,
                             text=True, env=bare_env(), timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = device / "device-report.json"
    print(f"check on the device: {time.perf_counter() - start:.1f} s")
    r = cli.invoke(app, ["bench", artifact, "--backend", "onnxruntime", "--budget-s", "1", "--warmup-iters", "1",
                         "--warmup-s", "0", "--no-roofline", "--out", str(where / "bench"), "--json"])
    assert r.exit_code == 0, r.output
    bench = where / "bench.json"
    bench.write_text(r.stdout)
    return {"where": where, "device": device, "report": report, "bench": bench}


def test_compare_shows_the_bench_row_and_the_device_row_verified_on_the_device(round_trip):
    r = CliRunner().invoke(app, ["compare", str(round_trip["bench"]), str(round_trip["report"]),
                                 "--out", str(round_trip["where"] / "compare"), "--json"])
    assert r.exit_code == 0, r.output
    merged = json.loads(r.stdout)
    bench_rows = [row for row in merged["results"] if "device_check" not in row]
    (device_row,) = [row for row in merged["results"] if "device_check" in row]
    assert [row["backend"] for row in bench_rows] == ["onnxruntime"] and bench_rows[0]["available"]
    assert device_row["device_check"]["verdict"] == "verified on the device" and device_row["available"]
    assert device_row["backend"] == "onnxruntime" and device_row["latency_ms"]["p50"] > 0
    timed = json.loads(round_trip["report"].read_text())["timings"]["cases"]
    first = next(iter(timed.values()))
    assert device_row["latency_ms"]["p50"] == first["p50_ms"]
    # The spread of the round medians, once the check times in rounds (the device-report timing contract).
    assert device_row.get("round_spread") == first.get("spread")
    text = " ".join(CliRunner().invoke(app, ["compare", str(round_trip["bench"]), str(round_trip["report"]), "--out",
                                             str(round_trip["where"] / "compare")]).stdout.split())
    assert "verified on the device" in text and "here: verified" in text


def test_a_tampered_device_report_shows_its_row_as_failed_never_as_a_speed(round_trip):
    report = json.loads(round_trip["report"].read_text())
    report["cases"][0]["outputs"]["logits"]["data"][0] += 5.0
    tampered = round_trip["device"] / "tampered-report.json"  # beside its package: judged against it
    tampered.write_text(json.dumps(report))
    r = CliRunner().invoke(app, ["compare", str(round_trip["bench"]), str(tampered),
                                 "--out", str(round_trip["where"] / "tampered"), "--json"])
    assert r.exit_code == 0, r.output
    merged = json.loads(r.stdout)
    (row,) = [row for row in merged["results"] if "device_check" in row]
    assert row["device_check"]["verdict"] == "failed" and not row["available"] and "latency_ms" not in row
    assert len(merged["ranking"]["1"]) == 1  # the bench row alone is ranked
    # On the page: the row, failed and why; no chart draws it.
    text = Path(merged["files"]["html"]).read_text()
    assert 'data-status="failed"' in text and "failed: random-0" in text
    from vitexport.report import page

    assert all(not g.charts for g in page.groups(merged) if g.device == row["device_label"])


def test_the_page_of_both_reports_shows_both_rows_in_chromium(round_trip):
    page = round_trip["where"] / "page.html"
    r = CliRunner().invoke(app, ["report", str(round_trip["bench"]), str(round_trip["report"]), "--out", str(page)])
    assert r.exit_code == 0, r.output
    with chromium() as driver:
        from selenium.webdriver.common.by import By

        driver.get(page.resolve().as_uri())
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 1400  # no sideways scroll
        across = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "table.devices tbody tr")]
        assert len(across) == 2 and "verified on the device" in across[1], across
        rows = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "table.rows tbody tr") if row.is_displayed()]
        assert len(rows) == 2, rows
        on_device = [row for row in rows if "verified on the device" in row]
        assert len(on_device) == 1 and "verified" in next(row for row in rows if row not in on_device)
        groups = [g.text for g in driver.find_elements(By.CSS_SELECTOR, "section.group h3")]
        assert len(groups) == 2, groups  # the machine bench ran on, and the device (the same box, its check)
