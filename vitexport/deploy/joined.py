"""Device reports beside bench reports (`vitexport compare`, `vitexport report`): each device report is
judged first, exactly as `verify --device-report` judges it, then read as the report of one machine
(the device) with one row per batch size its check timed, so that merging, ranking, the tables and the
page take it like any bench report.

A device report names its package by the sha256 of the package's manifest. Its package is looked for in
the report's own folder (where the check writes it) and in each `--package` folder given, so several
reports, each from its own package, are judged in one command. A row is "verified on the device" only
when the device's outputs passed there; a failed row keeps why and no latency (it never reads as a
speed); a row whose package is not at hand is "not judged", with why, and its times are shown as
unverified.

Older reports (3 warm-up and 10 timed runs, only p50, mean and min per case) are read too: their rows
have no rounds and no spread."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable

from vitexport.core.errors import ParityError, UsageError
from vitexport.deploy import judge, manifest
from vitexport.report import devices
from vitexport.report.names import device_label

Loader = Callable[[Path], dict]
STATS = ("p50", "mean", "min", "max", "p90", "p99")


def loader(packages: Iterable[Path] = ()) -> Loader:
    """A reader for `merge`: a device report judged and read as a bench report; any other file as a
    bench report (`vitexport.bench.stored.load`, which refuses what is not one)."""
    folders = [Path(p) for p in packages]

    def load(path: Path) -> dict:
        from vitexport.bench.stored import load as load_bench

        return as_bench_report(Path(path), folders) if is_device_report(path) else load_bench(Path(path))

    return load


def is_device_report(path: Path) -> bool:
    """Whether the file is a device report (by its schema's name; the whole is checked when it is read)."""
    from vitexport.core.jsonfile import read_json

    data = read_json(Path(path), "report")
    schema = data.get("schema") if isinstance(data, dict) else None
    if isinstance(schema, str) and schema.startswith("vitexport.device-report/") and schema != judge.SCHEMA:
        raise UsageError(f"{path} is a {schema} report; this vitexport reads {judge.SCHEMA}")
    return schema == judge.SCHEMA


def any_device_reports(paths: Iterable[Path]) -> bool:
    return any(is_device_report(Path(p)) for p in paths)


def package_for(path: Path, report: dict, packages: list[Path]) -> Path | None:
    """The folder of the package the report names (by its manifest's sha256): the report's own folder
    first, then the given ones; None when none of them is it."""
    wanted = report["package"]["manifest_sha256"]
    for folder in [path.parent, *packages]:
        if (folder / manifest.NAME).is_file() and manifest.digest(folder) == wanted:
            return folder
    return None


def judged(path: Path, report: dict, packages: list[Path]) -> dict[str, Any]:
    """The verdict on the report: {"verdict", "reason", "package", "parity", "artifact"}; bad input (a
    report that is not one, an output that is not readable) raises UsageError as verify does."""
    folder = package_for(path, report, packages)
    if folder is None:
        digest = report["package"]["manifest_sha256"]
        return {"verdict": devices.NOT_JUDGED, "package": None, "parity": {}, "artifact": {},
                "reason": f"its package (manifest sha256 {digest[:12]}) is not at hand: give its folder with "
                          "--packages DIR"}
    artifact = manifest.read(folder)["artifact"]
    try:
        result = judge.judge(path, package=folder)
    except ParityError as e:
        if not e.result:  # the package itself is damaged: its golden outputs prove nothing
            return {"verdict": devices.NOT_JUDGED, "reason": str(e), "package": str(folder), "parity": {},
                    "artifact": artifact}
        parity = e.result.get("parity") or {}
        why = "; ".join((parity.get("failures") or [])[:3]) or str(e)  # the first few, as verify says them
        return {"verdict": devices.FAILED, "reason": why, "package": str(folder), "parity": parity,
                "artifact": artifact, "precision": e.result.get("precision")}
    return {"verdict": devices.VERIFIED, "reason": None, "package": str(folder), "parity": result["parity"],
            "artifact": artifact, "precision": result.get("precision")}


def as_bench_report(path: Path, packages: list[Path]) -> dict:
    """The device report at `path`, judged, as a `vitexport.bench/1` report of one machine."""
    from vitexport.bench.stored import SCHEMA
    from vitexport.core import schemas
    from vitexport.core.jsonfile import read_json

    report = read_json(path, "device report")
    if not isinstance(report, dict) or report.get("schema") != judge.SCHEMA:
        raise UsageError(f"{path} is not a readable device report (schema {judge.SCHEMA})")
    schemas.check("device-report", report, f"{path} is not a readable device report")
    verdict = judged(path, report, packages)
    facts = report["device"]
    conditions = report.get("conditions") if isinstance(report.get("conditions"), dict) else None
    label = device_label(facts, conditions, report["package"].get("target"))
    timings = report.get("timings") or {}
    rows = [_row(report, verdict, batch, case, timings, conditions)
            for batch, case in _case_per_batch(report).items()]
    artifact = verdict["artifact"]
    fingerprint = {k: facts.get(k) for k in ("cpu", "os", "machine", "jetson_l4t", "jetson_power_mode")
                   if isinstance(facts.get(k), str)}
    if isinstance(report.get("created"), str):
        fingerprint["timestamp"] = report["created"]
    return {"schema": SCHEMA, "model": artifact.get("model"), "label": label, "fingerprint": fingerprint,
            "settings": None,
            "conditions": None, "results": rows, "roofline": None,
            "device": {"facts": facts, "package": verdict["package"], "verdict": verdict["verdict"],
                       "reason": verdict["reason"], "target": report["package"].get("target"),
                       "budget_s": _number(timings.get("budget_s")), "conditions": conditions}}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def bench_name(backend: str, provider: Any) -> str:
    """The name `bench` gives a backend run the way the device ran it ('onnxruntime' for an ONNX artifact
    on CPUExecutionProvider), so that its rows and the device's read alike; else the backend's own name."""
    from vitexport import backends

    try:
        targets = backends.get(backend).bench_targets()
    except UsageError:
        return backend
    same = [t for t in targets if provider and str(provider) in (t.run.providers or ())]
    return same[0].name if same else targets[0].name if len(targets) == 1 else backend


def _case_per_batch(report: dict) -> dict[int, dict]:
    """The timed case of each batch size: the first the check timed at it (every case of one batch
    runs the same shapes). A report without timings gives none."""
    cases = ((report.get("timings") or {}).get("cases") or {})
    picked: dict[int, dict] = {}
    for name, case in cases.items():
        batch = case.get("batch")
        if isinstance(batch, int) and not isinstance(batch, bool) and batch not in picked:
            picked[batch] = {**case, "name": name}
    return dict(sorted(picked.items()))


def _row(report: dict, verdict: dict, batch: int, case: dict, timings: dict, conditions: dict | None) -> dict:
    from vitexport.verify.tasks import task_brief

    facts, package, artifact = report["device"], report["package"], verdict["artifact"]
    parity = verdict["parity"]
    runtime = " ".join(str(facts[k]) for k in ("runtime",) if facts.get(k)) or None
    backend = str(artifact.get("backend") or package.get("backend") or "unknown")
    row: dict[str, Any] = {
        "backend": bench_name(backend, facts.get("provider")),
        "batch_size": batch, "model": artifact.get("model"),
        "precision": verdict.get("precision") or artifact.get("precision"),
        "artifact": package.get("artifact"), "provider": str(facts.get("provider") or facts.get("runtime") or "")
        or None,
        "verification": {"status": {devices.VERIFIED: "verified", devices.FAILED: "FAILED"}.get(
            verdict["verdict"], "unverified"),
            **{k: parity[k] for k in ("cosine_similarity", "max_abs_error") if _number(parity.get(k)) is not None},
            **task_brief(parity)},
        "device_check": {"verdict": verdict["verdict"], "reason": verdict["reason"], "case": case["name"],
                         "runtime": runtime, "package": verdict["package"],
                         "platform": (conditions or {}).get("platform") or package.get("target"),
                         "conditions": devices.conditions(conditions) or None},
    }
    p50 = _number(case.get("p50_ms"))
    if verdict["verdict"] == devices.FAILED:
        # A failed row never reads as a speed: its times stay in the device report, not in any table.
        return {**row, "available": False, "reason": f"failed on the device: {verdict['reason']}"}
    if not p50:
        return {**row, "available": False, "reason": f"the device report has no time for case {case['name']}"}
    latency = {s: _number(case.get(f"{s}_ms")) for s in STATS}
    rounds = case.get("per_round") if isinstance(case.get("per_round"), dict) else None
    load_ms = _number(timings.get("load_ms"))
    mean = latency["mean"] or p50  # images per second as bench says them: batch over the mean latency
    row.update(available=True, latency_ms={**latency, "std": None}, throughput_ips=batch * 1000.0 / mean,
               iterations=case.get("runs") if isinstance(case.get("runs"), int) else None,
               rounds=case.get("rounds") if isinstance(case.get("rounds"), int) else None,
               round_spread=_number(case.get("spread")),
               load_s=load_ms / 1000.0 if load_ms is not None else None,
               load_cold_s=load_ms / 1000.0 if load_ms is not None and timings.get("cold_load") is True else None,
               first_inference_ms=_number(timings.get("first_inference_ms")))
    if rounds is not None:
        row["per_round"] = {k: list(rounds.get(k) or []) for k in ("median_ms", "reference_ms")}
    return {k: v for k, v in row.items() if v is not None}
