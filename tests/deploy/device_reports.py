"""Device reports from Jetson, iPhone and Android, as their checks write them (the device-report schema
with the timing contract: rounds, p50/p90/p99, spread, the platform's conditions), for a package built
in the test: tests/data/device-reports/*.json hold what the device says, this fills in what ties a
report to its package (the manifest's sha256) and the outputs the device computed (the golden ones,
or tampered)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vitexport.deploy import manifest

DATA = Path(__file__).resolve().parents[1] / "data" / "device-reports"
# fixture -> the device in the table's words
DEVICES = {"jetson": "Jetson Orin NX, 15 W", "ios": "iPhone 15 Pro, Neural Engine",
           "android": "Google Pixel 8, XNNPACK", "linux-older": "Intel Xeon Gold 6130, CPU"}
BENCH = DATA / "bench-xeon.json"  # a bench report of a Linux machine, to compare the devices with


def fixture(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def write_report(package: Path, name: str, where: Path, *, tamper: bool = False, file: str | None = None) -> Path:
    """The fixture `name` as the check on its device would have written it for `package`, at
    `where`/`file` (default NAME.json). `tamper`: one output value moved far beyond any tolerance."""
    report = fixture(name)
    golden = json.loads((package / "golden" / "golden.json").read_text())
    report["package"].update(manifest_sha256=manifest.digest(package), name=package.name)
    report["cases"] = [{"name": case["name"], "outputs": {
        out: {"shape": list(array.shape), "data": array.astype(np.float64).ravel().tolist()}
        for out, array in ((out, np.load(package / f)) for out, f in zip(golden["output_names"], case["outputs"]))}}
        for case in golden["cases"]]
    if tamper:
        first = report["cases"][0]["outputs"][golden["output_names"][0]]["data"]
        first[0] += 5.0
    path = where / (file or f"{name}.json")
    path.write_text(json.dumps(report))
    return path
