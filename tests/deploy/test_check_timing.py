"""A package's check times like bench: a warm-up, rounds within --budget-s with the reference kernel
beside them, percentiles over every run, the spread of the round medians and the device's conditions,
computed by roundstats.py, the very file bench's statistics are."""

from __future__ import annotations

import importlib.util
import json
import random
import time
from pathlib import Path

import pytest
from device_harness import copy_to_device, run_check

from vitexport.core import pagecache, roundstats

STARTUP_S = 30.0  # a fresh interpreter importing numpy and ONNX Runtime on a busy 2-core machine, loose


def test_the_check_times_each_case_in_rounds_within_its_budget(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    start = time.monotonic()
    run = run_check(device, "--budget-s", "0.5", "--threads", "2")  # --threads: ONNX Runtime's runner's flag
    wall = time.monotonic() - start
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((device / "device-report.json").read_text())
    cases = report["timings"]["cases"]
    assert report["timings"]["budget_s"] == 0.5 and report["package"]["batches"] == [1]
    # Every case spent its budget in timed rounds, and the whole check about budget x cases (loosely).
    assert 0.5 * len(cases) <= wall < 0.5 * len(cases) * 4 + STARTUP_S, wall
    for name, c in cases.items():
        assert c["rounds"] == roundstats.round_count(0.5) == len(c["per_round"]["median_ms"])
        assert len(c["per_round"]["reference_ms"]) == c["rounds"] and all(c["per_round"]["reference_ms"])
        assert c["runs"] >= c["rounds"] and c["warmup"] >= 1 and c["warmup_s"] >= 0.125
        assert c["min_ms"] <= c["p50_ms"] <= c["p90_ms"] <= c["p99_ms"] <= c["max_ms"], name
        assert c["spread"] == roundstats.relative_spread(c["per_round"]["median_ms"])
    conditions = report["conditions"]
    assert conditions["platform"] == "linux" and conditions["threads"] == 2 and conditions["rounds"] == sum(c["rounds"] for c in cases.values())
    assert conditions["reference_kernel"]["what"].startswith("numpy float32 matmul 256")
    assert {"steal", "clock_ghz", "phase_changes", "disturbed_rounds", "seconds"} <= set(conditions)
    assert "timing: 0.5 s per case" in run.stdout and "rounds disturbed" in run.stdout


def test_older_invocations_still_time_a_number_of_runs(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    run = run_check(device, "--warmup", "3", "--repeats", "10")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((device / "device-report.json").read_text())
    assert report["timings"]["budget_s"] is None
    for c in report["timings"]["cases"].values():
        assert c["warmup"] >= 3 and c["runs"] == 10 and c["rounds"] == roundstats.MIN_ROUNDS


def carried(package: Path, name: str = "roundstats.py"):
    """A module the package carries, imported from the package's file."""
    spec = importlib.util.spec_from_file_location("carried_" + name[:-3], str(package / name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("module", [roundstats, pagecache], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_package_carries_benchs_modules_byte_for_byte(onnx_package, module):
    import hashlib

    name = Path(module.__file__).name
    text = (onnx_package / name).read_bytes()
    assert text == Path(module.__file__).read_bytes()
    listed = json.loads((onnx_package / "manifest.json").read_text())
    assert listed["files"][name]["sha256"] == hashlib.sha256(text).hexdigest()
    assert name in listed["check"]["programs"]


@pytest.mark.parametrize("seed", range(5))
def test_benchs_numbers_and_the_carried_modules_are_the_same(onnx_package, seed):
    from vitexport.bench import conditions, fingerprint
    from vitexport.bench.session import Settings
    from vitexport.bench.stats import relative_spread
    from vitexport.core.timing import LatencyStats

    stats = carried(onnx_package)
    rng = random.Random(seed)
    samples = [rng.lognormvariate(0, 0.3) for _ in range(rng.randrange(1, 300))]
    bench = LatencyStats(samples, 1)
    assert stats.latency(samples) == {"mean": bench.mean, "min": bench.min, "max": bench.max, "p50": bench.p50,
                                      "p90": bench.p90, "p99": bench.p99}
    medians = samples[:12]
    assert stats.relative_spread(medians) == relative_spread(medians)
    refs = [rng.choice([None, 0.3 * rng.uniform(1, 2)]) for _ in range(12)]
    assert stats.disturbed(refs) == conditions.disturbed(refs)
    assert stats.phase_changes(refs) == conditions.phase_changes(refs)
    rounds = [{"reference_ms": r, "reference_each_ms": [r] if r else None, "steal": rng.random() / 10,
               "clock_ghz": 2.5 + rng.random(), "seconds": 0.25} for r in refs]
    reference = {"what": "numpy float32 matmul 256³", "flop": 2 * 256 ** 3}
    from_bench = conditions.summary(rounds, 2, reference)
    assert from_bench.pop("threads") == 2
    assert stats.summary(rounds, reference, fingerprint.clock_ghz()) == from_bench
    budget = rng.uniform(0.05, 80)
    settings = Settings.__new__(Settings)
    settings.rounds, settings.iters, settings.budget_s = None, None, budget
    assert stats.round_count(budget) == settings.round_count(paired=False)


def test_a_jetsons_power_mode_clocks_and_thermal_zones_are_read_from_sysfs(onnx_package, tmp_path):
    """A fake sysfs laid out as on a Jetson Orin (L4T 36): nothing here is a Jetson."""
    from vitexport.core.schemas.deploy import DeviceConditions

    timing = carried(onnx_package, "devicetiming.py")
    files = {"sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "1984000",
             "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq": "729600",
             "sys/class/devfreq/17000000.ga10b/cur_freq": "918000000",
             "sys/class/devfreq/15340000.vic/cur_freq": "115200000",  # not the GPU
             "sys/class/thermal/thermal_zone0/type": "cpu-thermal\n", "sys/class/thermal/thermal_zone0/temp": "47125",
             "sys/class/thermal/thermal_zone1/type": "gpu-thermal\n", "sys/class/thermal/thermal_zone1/temp": "45500",
             "sys/class/thermal/thermal_zone2/type": "PMIC-Die\n", "sys/class/thermal/thermal_zone2/temp": "-256000"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    readings = timing.jetson_readings({"jetson_power_mode": "15W", "jetson_l4t": "# R36"}, root=str(tmp_path))
    assert readings == {"power_mode": "15W", "clocks": {"cpu_mhz": (1984.0 + 729.6) / 2, "gpu_mhz": 918.0,
                                                        "emc_mhz": None},
                        "thermal_c": {"cpu-thermal": 47.125, "gpu-thermal": 45.5}}
    assert timing.platform_name({"jetson_l4t": "# R36"}) == "jetson"
    # What the check writes is what the device report's schema reads.
    conditions = DeviceConditions.model_validate({"rounds": 0, "platform": "jetson", "jetson": readings})
    assert conditions.jetson.thermal_c == {"cpu-thermal": 47.125, "gpu-thermal": 45.5}


def test_the_check_loads_cold_and_says_what_the_load_cost(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    run = run_check(device, "--budget-s", "0.2")
    assert run.returncode == 0, run.stdout + run.stderr
    timings = json.loads((device / "device-report.json").read_text())["timings"]
    assert timings["cold_load"] is True  # Linux: the package's files left the page cache before the load
    assert 0 < timings["first_inference_ms"] and timings["load_anon_mb"] >= 0 and timings["load_file_mb"] >= 0
    assert "load " in run.stdout and "first inference" in run.stdout and "memory added" in run.stdout


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc only")
def test_the_load_readings_measure_what_their_names_say(onnx_package, tmp_path, monkeypatch):
    import os

    timing, cache = carried(onnx_package, "devicetiming.py"), carried(onnx_package, "pagecache.py")
    files = [tmp_path / "a.onnx", tmp_path / "a.onnx.data"]
    for f in files:
        f.write_bytes(b"x" * 10_000)
    asked = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, o, n, advice: asked.append(
        (os.readlink(f"/proc/self/fd/{fd}"), advice)) or real(fd, o, n, advice))
    assert cache.drop_cached(files) is True
    assert asked == [(str(f), os.POSIX_FADV_DONTNEED) for f in files]
    before = timing.resident_mb()
    block = bytearray(64_000_000)
    block[::4096] = b"\1" * len(block[::4096])  # resident only once written
    costs = timing.load_costs(before, timing.resident_mb(), True, 1.5)
    assert costs["load_anon_mb"] >= 60 and costs["load_file_mb"] < 10
    assert costs["cold_load"] is True and costs["first_inference_ms"] == 1.5
