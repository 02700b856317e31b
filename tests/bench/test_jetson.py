"""Jetson power mode and clock state in the fingerprint, probed with fake `nvpmodel` and
`jetson_clocks` on PATH, and shown in reports; CPU instruction sets by the names each OS gives."""

import os
import stat

import pytest

from vitexport.bench.fingerprint import fingerprint, isa_names
from vitexport.bench.stored import SCHEMA
from vitexport.core import environment
from vitexport.core.environment import clock_state, nvpmodel_mode
from vitexport.report.files import markdown_text
from vitexport.report.names import jetson_line, machine_label

ORIN_LOCKED = """SOC family:tegra234  Machine:NVIDIA Jetson AGX Orin Developer Kit
Online CPUs: 0-11
cpu0: Online=1 Governor=schedutil MinFreq=2201600 MaxFreq=2201600 CurrentFreq=2201600 IdleStates: WFI=0 c7=0
cpu1: Online=1 Governor=schedutil MinFreq=2201600 MaxFreq=2201600 CurrentFreq=2201600 IdleStates: WFI=0 c7=0
cpu8: Online=0 Governor=schedutil MinFreq=115200 MaxFreq=2201600 CurrentFreq=115200 IdleStates: WFI=0 c7=0
GPU MinFreq=1300500000 MaxFreq=1300500000 CurrentFreq=1300500000
EMC MinFreq=204000000 MaxFreq=3199000000 CurrentFreq=3199000000 FreqOverride=1
NV Power Mode: MAXN
"""
ORIN_DYNAMIC = ORIN_LOCKED.replace("GPU MinFreq=1300500000", "GPU MinFreq=306000000")


def script(folder, name, text, code=0):
    """An executable `name` in `folder` that records its call and prints `text`."""
    path = folder / name
    marker = folder / f"{name}.called"
    path.write_text(f"#!/bin/sh\ntouch '{marker}'\ncat <<'EOF'\n{text}\nEOF\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return marker


@pytest.fixture
def jetson(tmp_path, monkeypatch):
    """A fake Jetson: an L4T release file and the two tools on PATH."""
    release = tmp_path / "nv_tegra_release"
    release.write_text("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr(environment, "TEGRA_RELEASE", release)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_power_mode_and_locked_clocks_reach_the_fingerprint(jetson):
    script(jetson, "nvpmodel", "NV Fan Mode:quiet\nNV Power Mode: MAXN\n0")
    script(jetson, "jetson_clocks", ORIN_LOCKED)
    fp = fingerprint(2)
    assert fp["jetson_l4t"].startswith("# R36 (release), REVISION: 4.3")
    assert fp["jetson_power_mode"] == "MAXN" and fp["jetson_clocks"] == "locked"


def test_unlocked_clocks_and_a_refusing_jetson_clocks(jetson):
    script(jetson, "nvpmodel", "NV Power Mode: 15W\n2")
    script(jetson, "jetson_clocks", ORIN_DYNAMIC)
    assert environment.jetson_power() == {"power_mode": "15W", "clocks": "dynamic"}
    script(jetson, "jetson_clocks", "Error: please run as root", code=1)  # without sudo
    assert environment.jetson_power() == {"power_mode": "15W", "clocks": None}


def test_nothing_is_probed_off_a_jetson(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    markers = [script(bin_dir, "nvpmodel", "NV Power Mode: MAXN\n0"), script(bin_dir, "jetson_clocks", ORIN_LOCKED)]
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(environment, "TEGRA_RELEASE", tmp_path / "absent")
    fp = fingerprint(1)
    assert fp["jetson_power_mode"] is None and fp["jetson_clocks"] is None
    assert not any(m.exists() for m in markers)


@pytest.mark.parametrize("text,mode", [("NV Fan Mode:quiet\nNV Power Mode: MAXN\n0\n", "MAXN"),
                                       ("NV Power Mode:MODE_30W_ALL\n3", "MODE_30W_ALL"),
                                       ("nothing useful", None), (None, None)])
def test_nvpmodel_output(text, mode):
    assert nvpmodel_mode(text) == mode


def test_clock_state_ignores_offline_cores_and_memory_clocks():
    assert clock_state(ORIN_LOCKED) == "locked"  # cpu8 is offline, EMC may scale: still locked
    assert clock_state(ORIN_DYNAMIC) == "dynamic"
    assert clock_state("SOC family:tegra234\n") is None and clock_state(None) is None


def test_reports_show_the_power_mode_and_clocks(tmp_path):
    fp = {"cpu": "ARMv8 Processor rev 1 (v8l)", "gpus": ["Orin"], "jetson_l4t": "# R36 (release), REVISION: 4.3",
          "jetson_power_mode": "MAXN", "jetson_clocks": "locked"}
    data = {"schema": SCHEMA, "model": "tiny", "label": None, "fingerprint": fp, "settings": {"threads": 6},
            "results": [{"backend": "torch", "batch_size": 1, "available": False, "reason": "x"}], "roofline": None}
    assert machine_label(data) == "Orin (MAXN)"
    assert machine_label({**data, "label": "bench-orin"}) == "bench-orin"
    assert "Jetson R36 (release), REVISION: 4.3, power mode MAXN, clocks locked" in markdown_text(data)
    assert jetson_line({"cpu": "Xeon"}) == ""


@pytest.mark.parametrize("flags,names", [
    ("fpu avx avx2 fma avx512f avx512_vnni avx_vnni amx_tile amx_int8".split(),
     ["AVX2", "FMA", "AVX-512", "AVX-512 VNNI", "AVX-VNNI", "AMX", "AMX-INT8"]),
    ("fp asimd evtstrm aes asimdhp asimddp sve i8mm bf16".split(),  # Linux on Arm (Orin, Graviton)
     ["NEON", "NEON FP16", "dot product", "int8 matmul", "BF16", "SVE"]),
    (["AVX2", "FMA", "AVX512F", "AVX512VNNI", "SSE4.2"], ["AVX2", "FMA", "AVX-512", "AVX-512 VNNI"]),  # Intel Mac
    (["neon", "FEAT_DotProd", "FEAT_I8MM", "FEAT_BF16", "FEAT_SME"],  # Apple silicon hw.optional.*
     ["NEON", "dot product", "int8 matmul", "BF16", "SME"]),
    (["sse2"], []),
])
def test_instruction_sets_by_every_name(flags, names):
    assert isa_names(flags) == names
