"""`vitexport verify --device-report FILE`: a report written by a package's check on the device, judged
against that package's golden outputs with the parity check every export goes through.

The report is data from elsewhere: it is read bounded (jsonfile.read_json), every field is checked
for its type before use, and nothing in it is imported or run. It belongs to the package whose
manifest.json has the sha256 it names (exit 2 otherwise); the package's golden files must still be
the ones its manifest lists (exit 4 otherwise: the reference itself changed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from vitexport.core.errors import ParityError, RegressionError, UsageError
from vitexport.deploy import manifest
from vitexport.report.names import device_name

SCHEMA = "vitexport.device-report/1"
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
MAX_DIMS = 8


def judge(report_path: str | Path, *, package: str | Path | None = None, atol: float | None = None,
          rtol: float | None = None, gate=None, baseline: str | Path | None = None) -> dict[str, Any]:
    """The verify result for the report at `report_path` (the package: `package`, default the report's
    folder). Raises ParityError (exit 4) when the device's outputs leave tolerance; with `baseline`
    (an earlier device report of the same artifact on the same device) the timings are compared with
    it (`vitexport.deploy.gate`, the result's `timing_baseline`) and RegressionError (exit 5) raised
    when a case is slower beyond the noise."""
    from vitexport.core import schemas
    from vitexport.core.jsonfile import read_json
    from vitexport.verify.checks import judge_task
    from vitexport.verify.parity import compare

    report_path = Path(report_path)
    report = read_json(report_path, "device report")
    _check_report(report, report_path)
    old = None
    if baseline is not None:  # bad input before any judgement
        from vitexport.deploy import gate as timing_gate

        old = timing_gate.load_baseline(Path(baseline))
        timing_gate.check_comparable(report, old, Path(baseline))
    folder = Path(package) if package is not None else report_path.parent
    if not (folder / manifest.NAME).exists():
        raise UsageError(f"{folder} holds no package manifest: pass --package DIR, the package the report's check "
                         "ran from")
    listed = manifest.read(folder)
    if report["package"]["manifest_sha256"] != manifest.digest(folder):
        raise UsageError(f"{report_path} does not belong to the package {folder} (it names another manifest: a "
                         "report of another package, or of an earlier one of this name)")
    golden_files = sorted(n for n in listed["files"] if n.startswith("golden/"))
    problem = manifest.changed(folder, listed, golden_files)
    if problem:
        raise ParityError(f"the package {folder.name} is damaged, so its golden outputs prove nothing: {problem}")
    golden = schemas.check("golden", read_json(folder / "golden" / "golden.json", "golden data"),
                           folder / "golden" / "golden.json")
    if getattr(gate, "task_gates", None):  # limits the package's model is judged by, never dropped unsaid
        from vitexport.verify.tasks import check_gate_overrides

        check_gate_overrides(gate.task_gates, task=golden.get("task", "classification"))
    tol = _tolerance(listed, golden, atol, rtol, gate)
    got = {case["name"]: case for case in report["cases"]}
    unknown = sorted(set(got) - {c["name"] for c in golden["cases"]})
    if unknown:
        raise UsageError(f"{report_path} reports case {unknown[0]!r}, which its package does not have")
    names = golden["output_names"]
    runs, images = [], None
    for case in golden["cases"]:
        reference = {n: np.load(folder / f, allow_pickle=False) for n, f in zip(names, case["outputs"])}
        outputs = got.get(case["name"], {}).get("outputs", {})
        candidate = {n: _array(outputs[n], f"{case['name']} {n}", report_path) for n in names if n in outputs}
        runs.append((case["batch"], case["name"], reference, candidate))
        if case.get("images") is not None and names[0] in candidate:
            images = (case, reference[names[0]], candidate[names[0]])
    parity = compare(runs, tol, golden["precision"])
    task = golden.get("task", "classification")
    if all(set(cand) == set(names) for _b, _f, _r, cand in runs):  # a missing output already failed above
        judge_task(parity, task, runs, golden["precision"], golden.get("class_scores", "softmax"))  # as on the device
    parity.deterministic = report.get("deterministic") if isinstance(report.get("deterministic"), bool) else None
    if parity.deterministic is False:
        parity.fail("the device gave different outputs for the same input twice")
    if images is not None and images[1].shape == images[2].shape and task == "classification":
        _judge_images(parity, tol, folder, *images)
    facts = report["device"]
    result = {
        "backend": listed["artifact"]["backend"],
        "artifact": str((folder / listed["artifact"]["file"]).resolve()),
        "package": str(folder.resolve()),
        "target": listed["target"],
        "device_report": str(report_path.resolve()),
        "status": "verified" if parity.passed else "FAILED",
        "provider": str(facts.get("provider") or facts.get("runtime") or "unknown runtime"),
        "model": listed["artifact"].get("model"),
        "precision": golden["precision"],
        "device": facts,
        "timings": report.get("timings") if isinstance(report.get("timings"), dict) else {},
        "info": {},
        "parity": parity.to_dict(),
    }
    if not parity.passed:
        raise ParityError(f"{result['backend']} artifact on {device_name(facts)} does not match PyTorch: "
                          + "; ".join(parity.failures[:3]), result)
    if old is not None:
        from vitexport.deploy import gate as timing_gate

        comparison = result["timing_baseline"] = timing_gate.compare(report, old, Path(baseline))
        if comparison["regressions"]:
            raise RegressionError(timing_gate.message(comparison), result)
    return result


def _check_report(report: Any, path: Path) -> None:
    """UsageError naming what is wrong with anything that is not a device report of this schema: the
    schema's name first, then every field (`vitexport.core.schemas.deploy.DeviceReport`)."""
    from vitexport.core import schemas

    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        schema = report.get("schema") if isinstance(report, dict) else None
        raise UsageError(f"{path} is not a readable device report: schema {schema!r}, expected {SCHEMA}")
    schemas.check("device-report", report, f"{path} is not a readable device report")


def _array(entry: Any, where: str, path: Path) -> np.ndarray:
    """An output as the report holds it ({"shape", "data"}, non-finite values as strings) -> float64."""
    def bad(what: str) -> UsageError:
        return UsageError(f"{path}: output {where} is not readable: {what}")

    if not isinstance(entry, dict):
        raise bad("expected an object with shape and data")
    shape, data = entry.get("shape"), entry.get("data")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in shape):
        raise bad("shape should list at most 8 non-negative sizes")
    if not isinstance(data, list) or len(data) != math.prod(shape):
        raise bad(f"data should hold {math.prod(shape)} values for shape {shape}")
    values = []
    for v in data:
        if isinstance(v, str) and v in NON_FINITE:
            values.append(NON_FINITE[v])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            values.append(float(v))
        else:
            raise bad(f"{v!r} is not a number")
    return np.asarray(values, dtype=np.float64).reshape(shape)


def _tolerance(listed: dict, golden: dict, atol, rtol, gate):
    """The golden tolerance, with the precision's accuracy gate and the user's overrides."""
    from dataclasses import replace

    from vitexport import backends
    from vitexport.verify.parity import TOLERANCES, Tolerance

    tol = golden.get("tolerance")
    if not isinstance(tol, dict) or not all(isinstance(tol.get(k), (int, float))
                                            for k in ("atol", "rtol", "min_cosine")):
        raise UsageError("the package's golden/golden.json has no tolerance")
    try:
        profile = backends.get(listed["artifact"]["backend"]).tolerance(golden["precision"])
    except UsageError:
        profile = TOLERANCES.get(golden["precision"], Tolerance(0, 0, 0))
    base = replace(profile, atol=float(tol["atol"]), rtol=float(tol["rtol"]), min_cosine=float(tol["min_cosine"]))
    return base.override(atol, rtol, getattr(gate, "min_top1_agreement", None),
                         getattr(gate, "max_accuracy_drop", None),
                         getattr(gate, "task_gates", None) or golden.get("task_gates"))


def _judge_images(parity, tol, folder: Path, case: dict, reference: np.ndarray, candidate: np.ndarray) -> None:
    from vitexport.verify.checks import apply_gate, image_check

    parity.images = image_check(f"{folder.name}/golden ({len(case['images'])} images)",
                                {"reference": [reference], "candidate": [candidate]}, case.get("labels"))
    apply_gate(parity, tol)
