"""Rows timed on a device in words: the device as a table names it, its conditions, its verdict."""

from __future__ import annotations

import pytest

from vitexport.report import devices
from vitexport.report.names import device_label, short_provider


@pytest.mark.parametrize("facts, conditions, target, words", [
    ({"model": "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "jetson_power_mode": "15W",
      "provider": "TensorrtExecutionProvider"}, {"platform": "jetson", "jetson": {"power_mode": "15W"}}, "jetson",
     "Jetson Orin NX, 15 W"),
    ({"model": "NVIDIA Jetson AGX Orin Developer Kit", "jetson_l4t": "# R36", "jetson_power_mode": "MAXN"}, None,
     None, "Jetson AGX Orin, MAXN"),
    ({"model": "iPhone 15 Pro", "runtime": "Core ML", "compute_units": "cpu_and_ne"}, {"platform": "ios"}, "ios",
     "iPhone 15 Pro, Neural Engine"),
    ({"model": "iPhone16,1", "runtime": "ExecuTorch", "provider": "executorch-xnnpack", "compute_units": "cpu"},
     None, "ios", "iPhone16,1, XNNPACK"),
    ({"model": "Google Pixel 8", "runtime": "ExecuTorch (Android)", "provider": "executorch-xnnpack"},
     {"platform": "android"}, "android", "Google Pixel 8, XNNPACK"),
    # A PC by its CPU: its board's name says little of its speed.
    ({"model": "PowerEdge R640", "cpu": "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", "provider": "CPUExecutionProvider"},
     {"platform": "linux"}, "linux", "Intel Xeon Gold 6130, CPU"),
    ({"os": "Linux-6.8", "stand_in": True}, None, "linux", "Linux-6.8, stand-in"),
])
def test_a_device_is_named_in_the_words_people_use(facts, conditions, target, words):
    assert device_label(facts, conditions, target) == words


@pytest.mark.parametrize("provider, word", [("XNNPACKExecutionProvider", "XNNPACK"), ("executorch-coreml", "Core ML"),
                                            ("CUDAExecutionProvider", "CUDA"), ("GPU.0", "GPU.0")])
def test_a_provider_is_named_by_its_kernel_library(provider, word):
    assert short_provider(provider) == word


@pytest.mark.parametrize("conditions, words", [
    ({"platform": "jetson", "jetson": {"power_mode": "15W", "clocks": {"cpu_mhz": 1984, "gpu_mhz": None,
                                                                       "emc_mhz": 3199},
                                       "thermal_c": {"cpu": 41.0, "gpu": 44.6}}, "rounds": 5, "seconds": 10.4,
      "disturbed_rounds": 1},
     "power mode 15W; CPU 1984 MHz, EMC 3199 MHz; up to 45 °C (gpu); 5 rounds in 10 s; 1 of 5 rounds disturbed"),
    ({"platform": "ios", "ios": {"thermal_state": "serious", "low_power_mode": True}},
     "thermal state serious; Low Power Mode on"),
    ({"platform": "android", "android": {"thermal_status": "moderate", "charging": True, "battery_temp_c": None}},
     "thermal status moderate; charging"),
    ({"platform": "linux", "steal": {"mean": 0.004, "max": 0.03}, "clock_ghz": {"median": 2.6, "min": 2.6, "max": 2.6,
                                                                                "source": "cpuinfo"}},
     "steal 0.4% (max 3%); clock 2.60 GHz (cpuinfo)"),
    # Each reading null where the platform could not read it; an older report has none at all.
    ({"platform": "jetson", "jetson": {"power_mode": None, "clocks": None, "thermal_c": None}}, ""),
    (None, ""),
])
def test_a_devices_conditions_in_one_line(conditions, words):
    assert devices.conditions(conditions) == words


@pytest.mark.parametrize("row, words", [
    ({"device_check": {"verdict": "verified on the device", "reason": None}}, "verified on the device"),
    ({"device_check": {"verdict": "failed", "reason": "random-0 logits: max abs error 5"}},
     "failed: random-0 logits: max abs error 5"),
    ({"device_check": {"verdict": "not judged", "reason": "its package is not at hand"}},
     "not judged: its package is not at hand"),
    ({"verification": {"status": "verified"}}, "here: verified"),
    ({}, ""),
])
def test_a_rows_check_in_words(row, words):
    assert devices.verdict(row) == words
