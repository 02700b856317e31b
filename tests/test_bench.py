"""Latency statistics with a fake clock: exact, and independent of how busy the machine is."""

import json
import subprocess
import sys

import numpy as np
import pytest

from vitexport import bench
from vitexport.bench import (UNSTABLE_CV, LatencyStats, WallTimer, first_inference_ms, measure, peak_gpu_mb,
                             peak_rss_mb, percentile, time_load)
from vitexport.errors import UsageError


class FakeRunner:
    """Each run advances a fake clock by the next duration in a cycle."""

    def __init__(self, durations_s):
        self.now, self.durations, self.calls = 0.0, list(durations_s), 0

    def clock(self):
        return self.now

    def run(self):
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1


def timed(fake, **kw):
    args = dict(batch_size=1, warmup_iters=0, warmup_s=0.0, iters=None, budget_s=None, clock=fake.clock)
    return measure(fake.run, **{**args, **kw})


def test_fixed_iterations_give_exact_statistics():
    fake = FakeRunner([0.010])
    stats = timed(fake, batch_size=4, warmup_iters=3, iters=20)
    d = stats.to_dict()
    assert d["iterations"] == stats.count == 20 and fake.calls == 23  # 3 warm-up runs are not timed
    assert d["latency_ms"]["p50"] == pytest.approx(10.0) and d["latency_ms"]["std"] == pytest.approx(0.0, abs=1e-9)
    assert d["latency_ms"]["min"] == pytest.approx(10.0) and d["latency_ms"]["max"] == pytest.approx(10.0)
    assert d["throughput_ips"] == pytest.approx(400.0)  # 4 images per 10 ms
    assert d["cv"] == pytest.approx(0.0, abs=1e-9) and d["unstable"] is False


def test_warm_up_needs_both_its_runs_and_its_time():
    by_time = FakeRunner([0.25])
    timed(by_time, warmup_iters=1, warmup_s=1.0, iters=1)
    assert by_time.calls == 4 + 1  # four 0.25 s runs fill the 1 s warm-up, then one timed run
    by_count = FakeRunner([0.25])
    timed(by_count, warmup_iters=7, warmup_s=1.0, iters=1)
    assert by_count.calls == 7 + 1  # 1 s is reached after 4 runs, but 7 were asked for


def test_budget_stops_after_its_time_but_not_before_min_iters():
    fake = FakeRunner([0.5])
    assert timed(fake, budget_s=2.0, min_iters=3).count == 4
    slow = FakeRunner([1.0])
    assert timed(slow, budget_s=0.1, min_iters=5).count == 5


def test_budget_is_capped_for_very_fast_runs():
    fake = FakeRunner([1e-9])
    assert timed(fake, budget_s=10.0, min_iters=2, max_iters=50).count == 50


def test_fixed_iterations_win_over_a_budget():
    fake = FakeRunner([1.0])
    assert timed(fake, iters=3, budget_s=100.0).count == 3


def test_percentiles_of_a_known_distribution():
    fake = FakeRunner([i / 1000 for i in range(1, 101)])  # 1..100 ms
    d = timed(fake, iters=100).to_dict()["latency_ms"]
    assert d["p50"] == pytest.approx(50.5) and d["p90"] == pytest.approx(90.1) and d["p99"] == pytest.approx(99.01)
    assert d["min"] == pytest.approx(1.0) and d["max"] == pytest.approx(100.0)
    assert d["mean"] == pytest.approx(50.5) and d["std"] == pytest.approx(np.std(np.arange(1, 101), ddof=1))


def test_percentile_matches_numpy():
    values = list(np.random.default_rng(0).exponential(5.0, 37))
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_unstable_runs_are_flagged():
    noisy = LatencyStats([10.0, 30.0] * 10, 1)
    assert noisy.cv > UNSTABLE_CV and noisy.to_dict()["unstable"] is True
    steady = LatencyStats([10.0, 10.5] * 10, 1)
    assert steady.cv < UNSTABLE_CV and steady.unstable is False
    assert LatencyStats([10.0, 10.5] * 10, 1, unstable_cv=0.001).unstable is True


def test_one_sample_has_no_spread():
    one = LatencyStats([7.0], 2)
    assert one.std == 0.0 and one.p99 == 7.0 and one.throughput_ips == pytest.approx(2 / 0.007)
    with pytest.raises(ValueError):
        LatencyStats([], 1)


def test_sync_runs_inside_each_timed_sample():
    fake = FakeRunner([0.001])
    synced = []
    timed(fake, warmup_iters=2, iters=3, sync=lambda: synced.append(fake.calls))
    assert synced == [1, 2, 3, 4, 5]


def test_sync_time_counts_in_the_sample():
    fake = FakeRunner([0.001])

    def sync():  # the device finishing its queued work takes 4 ms more
        fake.now += 0.004

    d = timed(fake, iters=2, sync=sync).to_dict()
    assert d["latency_ms"]["mean"] == pytest.approx(5.0)


def test_a_timer_strategy_replaces_the_clock():
    class Fixed:
        name = "fixed"

        def __call__(self, fn):
            fn()
            return 2.5

    fake = FakeRunner([1.0])
    stats = timed(fake, iters=4, timer=Fixed())
    assert stats.p50 == 2.5 and fake.calls == 4


def test_wall_timer_reports_milliseconds():
    fake = FakeRunner([0.003])
    assert WallTimer(clock=fake.clock)(fake.run) == pytest.approx(3.0)


@pytest.mark.parametrize("kw", [dict(iters=None, budget_s=None), dict(iters=0), dict(budget_s=-1.0),
                                dict(budget_s=1.0, warmup_iters=-1), dict(iters=3, batch_size=0)])
def test_bad_settings_are_usage_errors(kw):
    with pytest.raises(UsageError):
        measure(lambda: None, **{"batch_size": 1, "warmup_s": 0, **kw})


def test_load_and_first_inference_are_timed_apart():
    fake = FakeRunner([0.2, 0.05])
    result, seconds = time_load(lambda: fake.run() or "session", clock=fake.clock)
    assert result == "session" and seconds == pytest.approx(0.2)
    assert first_inference_ms(fake.run, clock=fake.clock) == pytest.approx(50.0)


def test_thread_settings_for_each_runtime():
    assert bench.thread_env(3) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}
    assert bench.ort_thread_options(3) == {"intra_op_num_threads": 3, "inter_op_num_threads": 1}
    with pytest.raises(UsageError):
        bench.apply_threads(0, torch=False)


def test_apply_threads_in_a_fresh_process():
    """Importing the module loads no numeric library, so the environment is set before any of them."""
    code = ("import sys, json\nfrom vitexport.bench import apply_threads\n"
            "before = [m for m in ('numpy', 'torch', 'onnxruntime') if m in sys.modules]\n"
            "applied = apply_threads(1)\nimport os\n"
            "print(json.dumps({'before': before, 'applied': applied, 'omp': os.environ['OMP_NUM_THREADS']}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["before"] == [] and data["applied"]["late"] == [] and data["omp"] == "1"
    assert data["applied"]["torch"] == 1 and data["applied"]["ort"]["intra_op_num_threads"] == 1


def test_peak_memory_is_read_for_this_process():
    assert 1.0 < peak_rss_mb() < 1e6
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        assert peak_gpu_mb() is None


@pytest.mark.gpu
@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA device")
def test_wall_timer_with_sync_times_gpu_work():
    import torch

    x = torch.randn(2048, 2048, device="cuda")
    stats = measure(lambda: x @ x, batch_size=1, warmup_iters=2, warmup_s=0, iters=5, budget_s=None,
                    sync=torch.cuda.synchronize)
    assert stats.count == 5 and stats.min > 0.01  # ms: the product itself, not just its launch
    assert peak_gpu_mb() >= 3 * 2048 * 2048 * 4 / 1e6


def test_rounds_take_turns_and_pool_their_samples(tmp_path):
    from vitexport import api
    from vitexport.benchrun import pooled
    from vitexport.sources import SourceSpec

    report = api.bench(SourceSpec("tiny", overrides={"depth": 1}), ["torch"], [1], iters=4, warmup_iters=1,
                       warmup_s=0, budget_s=None, out_dir=tmp_path, roofline=False, rounds=2)
    row = report["results"][0]
    assert row["available"] and row["rounds"] == 2 and row["iterations"] == 4  # 2 per round, pooled
    assert report["settings"]["rounds"] == 2 and "samples_ms" not in row
    a = {"samples_ms": [1.0, 2.0], "load_s": 0.5, "first_inference_ms": 9.0, "peak_rss_mb": 10.0}
    b = {"samples_ms": [3.0, 4.0], "load_s": 0.1, "first_inference_ms": 1.0, "peak_rss_mb": 30.0}
    merged = pooled([a, b], 1)
    assert merged["latency_ms"]["p50"] == pytest.approx(2.5) and merged["iterations"] == 4
    assert merged["load_s"] == 0.5 and merged["first_inference_ms"] == 9.0 and merged["peak_rss_mb"] == 30.0


def test_a_cell_that_fails_in_a_later_round_is_not_run_again(tmp_path, monkeypatch):
    from vitexport import api, benchrun
    from vitexport.sources import SourceSpec

    calls = []
    real = benchrun.run_worker

    def flaky(job, threads):  # round 1 measures, round 2 fails, round 3 must not run
        calls.append(job["batch"])
        return real(job, threads) if len(calls) == 1 else {"ok": False, "reason": "worker died"}

    monkeypatch.setattr(benchrun, "run_worker", flaky)
    report = api.bench(SourceSpec("tiny", overrides={"depth": 1}), ["torch"], [1], iters=3, warmup_iters=0,
                       warmup_s=0, budget_s=None, out_dir=tmp_path, roofline=False, rounds=3)
    row = report["results"][0]
    assert len(calls) == 2 and row["available"] is False and row["reason"] == "worker died"
    assert "rounds" not in row and "latency_ms" not in row
