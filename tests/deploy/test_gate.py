"""`vitexport verify --device-report NEW --baseline OLD`: the device's timing gate, by bench's rule for
a stored report. The reports are real ones written by a package's check here, with their rounds set to
known values (this shared machine's own rounds are too noisy to promise a verdict): a quiet baseline,
the same 1.3x slower, the same again, and one whose reference kernel says the device was disturbed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from device_harness import copy_to_device, run_check
from typer.testing import CliRunner

from vitexport.cli.app import app

ROUNDS = 12
TIMES = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms")


@pytest.fixture(scope="module")
def checked(onnx_package, tmp_path_factory) -> dict:
    device = copy_to_device(onnx_package, tmp_path_factory.mktemp("gate"))
    run = run_check(device)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((device / "device-report.json").read_text())


def with_rounds(report: dict, factor: float = 1.0, disturbed: int = 0) -> dict:
    """The report with each case's rounds a quiet run of ROUNDS around its p50 (within +-2 %), every
    time multiplied by `factor`; the first `disturbed` rounds with a reference kernel 2x as slow and a
    median 1.6x as slow, as a device busy with something else gives."""
    out = json.loads(json.dumps(report))
    for case in out["timings"]["cases"].values():
        base = case["p50_ms"]
        medians = [base * (1 + 0.01 * ((i * 7) % 5 - 2)) * factor for i in range(ROUNDS)]
        refs = [0.3 * (1 + 0.01 * (i % 3)) for i in range(ROUNDS)]
        for i in range(disturbed):
            medians[i] *= 1.6
            refs[i] *= 2
        case.update({k: case[k] * factor for k in TIMES}, rounds=ROUNDS,
                    per_round={"median_ms": medians, "reference_ms": refs})
    return out


def judged(onnx_package: Path, tmp_path: Path, new: dict, old, *args: str):
    (tmp_path / "new.json").write_text(json.dumps(new))
    old_path = tmp_path / "old.json"
    old_path.write_text(old if isinstance(old, str) else json.dumps(old))
    return CliRunner().invoke(app, ["verify", "--device-report", str(tmp_path / "new.json"), "--package",
                                    str(onnx_package), "--baseline", str(old_path), *args])


def test_a_1_3x_slower_report_fails_the_gate_with_exit_5(onnx_package, checked, tmp_path):
    result = judged(onnx_package, tmp_path, with_rounds(checked, 1.3), with_rounds(checked), "--json")
    assert result.exit_code == 5, result.stderr
    gate = json.loads(result.stdout)["timing_baseline"]
    assert {c["row"].split()[0] for c in gate["regressions"]} == set(checked["timings"]["cases"])
    assert all(1.25 < c["ratio"] < 1.35 and c["low"] > 1.1 for c in gate["regressions"])
    assert "slower than the baseline" in result.stderr and result.stderr.count("\n") == 1
    table = judged(onnx_package, tmp_path, with_rounds(checked, 1.3), with_rounds(checked))
    assert table.exit_code == 5 and "slower: random-0 (batch 1) 1.30x" in table.stdout


def test_the_same_report_rejudged_passes(onnx_package, checked, tmp_path):
    result = judged(onnx_package, tmp_path, with_rounds(checked), with_rounds(checked), "--json")
    assert result.exit_code == 0, result.stderr
    gate = json.loads(result.stdout)["timing_baseline"]
    assert [c["verdict"] for c in gate["compared"]] == ["ok"] * len(checked["timings"]["cases"])
    assert not gate["unmatched"] and not gate["regressions"]


def test_a_disturbed_device_is_inconclusive_not_slower(onnx_package, checked, tmp_path):
    """Busy throughout (throttled, or running something else): every round 1.6x as slow, and the reference
    kernel beside it 2x as slow as in the baseline. The rounds say slower; the kernel says the device
    was not the same, so the gate cannot tell."""
    result = judged(onnx_package, tmp_path, with_rounds(checked, disturbed=ROUNDS), with_rounds(checked), "--json")
    assert result.exit_code == 0, result.stderr
    gate = json.loads(result.stdout)["timing_baseline"]
    assert {c["verdict"] for c in gate["compared"]} == {"inconclusive"}
    assert all(c.get("disturbed") for c in gate["compared"]) and "inconclusive" in result.stderr
    assert "reference kernel ran 2.00x as long" in gate["compared"][0]["why"]
    # Some rounds disturbed while the quiet ones match the baseline: a disturbance only adds time, so ok.
    mixed = judged(onnx_package, tmp_path, with_rounds(checked, disturbed=5), with_rounds(checked), "--json")
    assert mixed.exit_code == 0 and {c["verdict"] for c in json.loads(mixed.stdout)["timing_baseline"]["compared"]} \
        == {"ok"}


def test_wrong_outputs_are_exit_4_before_any_timing(onnx_package, checked, tmp_path):
    new = with_rounds(checked, 1.3)
    new["cases"][0]["outputs"]["logits"]["data"][3] += 0.01
    assert judged(onnx_package, tmp_path, new, with_rounds(checked)).exit_code == 4


def test_a_baseline_that_is_not_a_device_report_of_this_artifact_and_device_is_exit_2(onnx_package, checked,
                                                                                       tmp_path):
    other_artifact = dict(checked, package=dict(checked["package"], artifact="other.onnx"))
    other_device = dict(checked, device=dict(checked["device"], cpu="Cortex-A78AE"))
    verify_output = {"backend": "onnx", "precision": "fp32", "parity": {"passed": True}}
    for old, says in ((other_artifact, "another artifact"), (other_device, "another device"),
                      (verify_output, "is not a device report"), ("not json", "--baseline"),
                      (dict(checked, timings={"cases": {"random-0": {"p50_ms": -1}}}), "not a readable device")):
        result = judged(onnx_package, tmp_path, checked, old)
        assert result.exit_code == 2, (says, result.stderr)
        assert says in result.stderr and result.stderr.count("\n") == 1, result.stderr
    twice = CliRunner().invoke(app, ["verify", "--device-report", str(tmp_path / "new.json"), "--baseline",
                                     str(tmp_path / "old.json"), "--baseline", str(tmp_path / "old.json")])
    assert twice.exit_code == 2 and "one --baseline" in twice.stderr
