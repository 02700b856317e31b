"""`vitexport doctor`: what this machine is and has, and for every registered backend whether it can
export and run here, and why not.

The verdicts come from the backends' own hooks (`availability`, `runs_here`, `diagnose`,
`bench_unavailable`), so a new backend is diagnosed with nothing added here. Unlike every other
probe in vitexport, these import and try the libraries (ONNX Runtime sessions per provider, a
TensorRT builder): a listed provider or an importable module is not one that works. A probe that
crashes becomes that backend's reason, never the end of the report.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict
from typing import Any, Callable

from vitexport.backends.base import Availability, Diagnosis
from vitexport.core.errors import explained
from vitexport.core.progress import ProgressLike, using

SCHEMA = "vitexport.doctor/1"
# Runtimes worth listing when installed even before a registered backend names them.
ALSO_LISTED = ("executorch",)


def doctor(progress: ProgressLike = None) -> dict[str, Any]:
    """The whole report, as `vitexport doctor --json` prints it."""
    from vitexport import backends

    with using(progress) as reporter:
        names = list(backends.REGISTRY)
        reporter.step("trying each backend", total=len(names))
        verdicts = []
        for name in names:
            reporter.note(name)
            verdicts.append(backend_verdict(name))
            reporter.advance()
        reporter.step("describing the machine")
        # After the backends: torch is loaded by then, so GPUs are named as torch sees them.
        return {"schema": SCHEMA, **machine(), "backends": verdicts}


def machine() -> dict[str, Any]:
    from vitexport.backends import tool_packages
    from vitexport.bench import fingerprint
    from vitexport.core.environment import (
        available_memory_bytes,
        gpus,
        jetson_facts,
        jetson_power,
        total_memory_bytes,
        versions,
    )

    names, driver, source = gpus()
    jetson = jetson_facts()
    libc = " ".join(platform.libc_ver()).strip()
    return {
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "os": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
               "libc": libc or None, "macos": platform.mac_ver()[0] or None},
        "cpu": {"model": fingerprint.cpu_model(), "physical_cores": fingerprint.physical_cores(),
                "logical_cores": os.cpu_count(), "usable_cores": fingerprint.usable_cores(),
                "isa": fingerprint.cpu_features()},
        "memory": {"total_bytes": total_memory_bytes(), "available_bytes": available_memory_bytes()},
        "gpu": {"names": names, "driver": driver, "source": source},
        "jetson": {**jetson, **jetson_power()} if jetson["l4t"] else None,
        "libraries": versions(tool_packages() + ALSO_LISTED),
    }


def backend_verdict(name: str) -> dict[str, Any]:
    """Can it export here, can it run here, why not; what else to know; which bench rows can run."""
    from vitexport import backends

    try:
        be = backends.get(name)
    except Exception as e:  # a registered package that does not even import
        reason = failure(e)
        return {"name": name, "exports": None, "export": asdict(Availability(False, reason)),
                "run": asdict(Availability(False, reason)), "notes": [], "facts": {}, "bench": []}
    export = tried(be.availability) if be.exports else None
    run = tried(be.runs_here)
    usable = (export is not None and export.ok) or run.ok
    diagnosis = tried_diagnosis(be) if usable else Diagnosis()
    if not usable and be.extra:
        diagnosis.notes.append(f"pip install 'vitexport[{be.extra}]'")
    bench = [{"target": t.name, **asdict(tried(lambda t=t: bench_availability(be, t)))} for t in be.bench_targets()]
    return {"name": name, "exports": be.exports, "export": asdict(export) if export else None, "run": asdict(run),
            "notes": diagnosis.notes, "facts": diagnosis.facts, "bench": bench}


def bench_availability(be, target) -> Availability:
    reason = be.bench_unavailable(target)
    return Availability(reason is None, reason or "")


def tried(probe: Callable[[], Availability]) -> Availability:
    try:
        return probe()
    except Exception as e:
        return Availability(False, failure(e))


def tried_diagnosis(be) -> Diagnosis:
    try:
        return be.diagnose()
    except Exception as e:
        return Diagnosis([f"its probe failed: {failure(e)}"])


def failure(e: BaseException) -> str:
    text = explained(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
