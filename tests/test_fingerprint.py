import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from importlib import metadata

from vitexport.fingerprint import fingerprint


def test_fingerprint_describes_the_machine_without_naming_it():
    import getpass
    import socket

    fp = fingerprint(threads=2)
    assert fp["cpu"] and fp["logical_cores"] >= 1 and 1 <= fp["usable_cores"] <= fp["logical_cores"]
    assert fp["physical_cores"] is None or 1 <= fp["physical_cores"] <= fp["logical_cores"]
    assert fp["python"] == ".".join(map(str, sys.version_info[:3]))
    assert fp["libraries"]["numpy"] == metadata.version("numpy")
    assert fp["threads"] == 2 and fp["gpus"] and all(isinstance(g, str) for g in fp["gpus"])
    assert datetime.fromisoformat(fp["timestamp"]).utcoffset().total_seconds() == 0
    text = json.dumps(fp)
    assert socket.gethostname() not in text
    user = getpass.getuser()
    assert len(user) < 4 or user not in text  # no home directories or user names


def test_thread_environment_is_recorded(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    assert fingerprint(3)["thread_env"]["OMP_NUM_THREADS"] == "3"
    assert "MKL_NUM_THREADS" not in fingerprint(3)["thread_env"]


def test_fingerprinting_imports_no_runtime():
    code = ("import sys, json\nfrom vitexport.fingerprint import fingerprint\nfp = fingerprint(1)\n"
            "print(json.dumps([m for m in ('torch', 'onnxruntime', 'tensorrt', 'coremltools', 'numpy') "
            "if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PATH": os.environ.get("PATH", "")})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_gpus_fall_back_to_none(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    fp = fingerprint()
    assert fp["gpus"] == ["none"] and fp["gpu_source"] is None


def test_short_cpu_names():
    from vitexport.report import short_cpu

    assert short_cpu("AMD EPYC 7B13 64-Core Processor") == "AMD EPYC 7B13"
