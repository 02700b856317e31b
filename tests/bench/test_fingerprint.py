import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from importlib import metadata

import pytest

from vitexport.bench import fingerprint as fpmod
from vitexport.bench.fingerprint import fingerprint


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
    code = ("import sys, json\nfrom vitexport.bench.fingerprint import fingerprint\nfp = fingerprint(1)\n"
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
    from vitexport.report.names import short_cpu

    assert short_cpu("AMD EPYC 7B13 64-Core Processor") == "AMD EPYC 7B13"


# --- machine state: steal, the clock, the theoretical peak -------------------------------------------------


def test_steal_is_read_from_proc_stat(monkeypatch):
    stats = iter(["cpu  100 0 50 800 10 0 5 20 0 0\ncpu0 1 2 3\n", "cpu  150 0 60 880 10 0 5 60 0 0\n"])
    monkeypatch.setattr(fpmod, "_read", lambda path: next(stats) if path == "/proc/stat" else None)
    before, after = fpmod.cpu_times(), fpmod.cpu_times()
    assert before == (20, 985) and after == (60, 1165)
    assert fpmod.steal_share(before, after) == pytest.approx(40 / 180)
    assert fpmod.steal_share(None, after) is None and fpmod.steal_share(after, before) is None


def test_the_clock_where_it_can_be_read(monkeypatch):
    files = {"/proc/cpuinfo": "processor\t: 0\ncpu MHz\t\t: 2596.140\nprocessor\t: 1\ncpu MHz\t\t: 2600.000\n"}
    monkeypatch.setattr(fpmod, "_read", lambda path: files.get(path))
    monkeypatch.setattr(fpmod.Path, "glob", lambda self, pattern: iter(()))  # no cpufreq (a VM)
    ghz, source = fpmod.max_clock_ghz()
    assert ghz == pytest.approx(2.6) and source.startswith("cpuinfo (nominal")
    assert fpmod.clock_ghz() == (pytest.approx(2.59807), "cpuinfo")
    files.clear()
    monkeypatch.setattr(fpmod, "cpu_model", lambda: "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz")
    assert fpmod.max_clock_ghz() == (2.1, "the CPU's name (base clock)")


@pytest.mark.parametrize("features,vendor,family,precision,expected", [
    (["AVX2", "FMA", "AVX-512"], "AuthenticAMD", 25, "fp32", 32.0),  # Zen 4: 512-bit ops on 256-bit units
    (["AVX2", "FMA", "AVX-512"], "AuthenticAMD", 26, "fp32", 64.0),  # Zen 5
    (["AVX2", "FMA", "AVX-512"], "GenuineIntel", 6, "fp32", 64.0),
    (["AVX2", "FMA"], "GenuineIntel", 6, "fp32", 32.0),
    (["AVX2", "FMA", "AVX-512", "AVX-512 BF16"], "AuthenticAMD", 25, "bf16", 64.0),
    (["AVX2", "FMA", "AVX-512", "AMX-BF16", "AMX-INT8"], "GenuineIntel", 6, "bf16", 1024.0),
    (["AVX2", "FMA", "AVX-512", "AVX-512 VNNI"], "AuthenticAMD", 25, "int8", 128.0),
    (["AVX2", "FMA", "AVX-512", "AMX-INT8"], "GenuineIntel", 6, "int8", 2048.0),
    (["AVX2", "FMA"], "GenuineIntel", 6, "int8", 64.0),
    (["AVX2", "FMA"], "GenuineIntel", 6, "bf16", 32.0),  # no bf16 units: fp32's rate
    (["NEON"], "", None, "fp32", None),  # no rule for Arm: unknown, never guessed
])
def test_operations_per_cycle_from_the_instruction_sets(features, vendor, family, precision, expected):
    rule = fpmod.flop_per_cycle(features, vendor, family, precision)
    assert (rule[0] if rule else None) == expected


def test_theoretical_peak_is_cores_times_cycles_times_clock(monkeypatch):
    monkeypatch.setattr(fpmod, "cpu_vendor", lambda: ("AuthenticAMD", 25))
    monkeypatch.setattr(fpmod, "cpu_features", lambda: ["AVX2", "FMA", "AVX-512"])
    monkeypatch.setattr(fpmod, "max_clock_ghz", lambda: (3.7, "cpufreq maximum"))
    monkeypatch.setattr(fpmod, "physical_cores", lambda: 2)
    peak = fpmod.theoretical_peak(4)  # more threads than cores: the cores count
    assert peak["gflops"] == pytest.approx(2 * 32 * 3.7) and peak["cores"] == 2
    monkeypatch.setattr(fpmod, "max_clock_ghz", lambda: (None, "not readable"))
    assert fpmod.theoretical_peak(2)["gflops"] is None
