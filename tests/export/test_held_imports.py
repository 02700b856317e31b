"""A Ctrl-C while a backend's libraries load: held until they are loaded, then it stops the export.
Raised inside their import, a library that catches everything around an optional import (as
coremltools does) swallowed it, left half-imported modules behind, and the export finished with 0."""

from __future__ import annotations

import signal
import subprocess
import sys

SWALLOWING_IMPORT = """
import os, signal, sys, time
from vitexport import api, backends
from vitexport.models.sources import SourceSpec
onnx = type(backends.get("onnx"))
real = onnx.availability

def availability(self):  # its libraries' import, which catches everything around an optional part
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    except:  # noqa: E722
        pass
    return real(self)

onnx.availability = availability
try:
    api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), out_dir=sys.argv[1])
except KeyboardInterrupt:
    sys.exit(130)
print("not interrupted")
"""


def test_ctrl_c_while_a_backends_libraries_load_stops_the_export_once_they_are_loaded(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-c", SWALLOWING_IMPORT, str(out)], capture_output=True, text=True,
                         timeout=300, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert run.returncode == 130, run.stdout + run.stderr
    assert "stopping after loading onnx's libraries" in run.stderr
    assert not out.exists() or not [p.name for p in out.iterdir() if p.name != ".vitexport.lock"]
