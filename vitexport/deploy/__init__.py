"""Deploy packages that prove themselves on the device (`vitexport package`, `verify --device-report`).

A package is one folder per artifact and target: the artifact with its files and sidecar,
`manifest.json` (sha256 and size of every file, versions, target), `preprocessing.json`, `golden/`
(seeded inputs and images with PyTorch's outputs and the tolerance), the target's check program
and a README. On the device the check verifies every file, runs the golden inputs, times them as
bench does (with bench's statistics, vitexport/core/roundstats.py, carried as it is) and writes
`device-report.json`; back here `vitexport verify --device-report` judges that report against the
golden outputs with the same parity check every export goes through, and with `--baseline` its
timings against an earlier report's by bench's rule for a stored report.

How a backend's artifact is run there is the backend's to say (`Backend.device_check`); the check
programs that call it live in device/ (check.py for linux, jetson and macos, an XCTest for ios, an
instrumented test for android; in device/web/, a page and the check.py that drives it in a browser)
and are copied into each package as they are.

manifest: the manifest and which folders are packages. golden: golden inputs and outputs.
describe: preprocessing.json and the README. build: writing a package atomically. package: a package
from an exported artifact. judge: a device report against its package. joined: device reports judged,
then read as devices' rows beside bench reports (`compare`, `report`). gate: a device
report's timings against an earlier one's.

May import: core, models, verify, the backend spec, export, bench, report."""

from __future__ import annotations

from vitexport.backends.base import DeviceTarget
from vitexport.core.errors import UsageError

TARGETS: dict[str, DeviceTarget] = {
    "linux": DeviceTarget("linux", "python", "a Linux machine"),
    "jetson": DeviceTarget("jetson", "python", "an NVIDIA Jetson"),
    "macos": DeviceTarget("macos", "python", "a Mac"),
    "ios": DeviceTarget("ios", "swift", "an iPhone or iPad"),
    "android": DeviceTarget("android", "kotlin", "an Android phone"),
    "web": DeviceTarget("web", "web", "a web browser"),
}


def target(name: str) -> DeviceTarget:
    if name not in TARGETS:
        raise UsageError(f"--target must be one of {', '.join(TARGETS)}, got {name!r}")
    return TARGETS[name]
