"""Latency statistics with a fake clock: exact, and independent of how busy the machine is."""

import pytest

from vitexport.bench import UNSTABLE_CV, LatencyStats, measure


class FakeRunner:
    """Each run advances a fake clock by the next duration in a cycle."""

    def __init__(self, durations_s):
        self.now, self.durations, self.calls = 0.0, list(durations_s), 0

    def clock(self):
        return self.now

    def run(self):
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1


def test_fixed_iterations_give_exact_statistics():
    fake = FakeRunner([0.010])
    stats = measure(fake.run, batch_size=4, warmup_iters=3, warmup_s=0.0, iters=20, budget_s=None, clock=fake.clock)
    d = stats.to_dict()
    assert d["iterations"] == 20 and fake.calls == 23  # 3 warm-up runs are not timed
    assert d["latency_ms"]["p50"] == pytest.approx(10.0) and d["latency_ms"]["std"] == pytest.approx(0.0, abs=1e-9)
    assert d["throughput_ips"] == pytest.approx(400.0)
    assert d["unstable"] is False


def test_warm_up_lasts_at_least_its_time():
    fake = FakeRunner([0.25])
    measure(fake.run, batch_size=1, warmup_iters=1, warmup_s=1.0, iters=1, budget_s=None, clock=fake.clock)
    assert fake.calls == 4 + 1  # four 0.25 s runs fill the 1 s warm-up, then one timed run


def test_budget_stops_after_its_time_but_not_before_min_iters():
    fake = FakeRunner([0.5])
    stats = measure(fake.run, batch_size=1, warmup_iters=0, warmup_s=0.0, iters=None, budget_s=2.0, min_iters=3,
                    clock=fake.clock)
    assert stats.to_dict()["iterations"] == 4
    fast = FakeRunner([1.0])
    assert measure(fast.run, batch_size=1, warmup_iters=0, warmup_s=0, budget_s=0.1, min_iters=5,
                   clock=fast.clock).to_dict()["iterations"] == 5


def test_percentiles_of_a_known_distribution():
    fake = FakeRunner([i / 1000 for i in range(1, 101)])  # 1..100 ms
    d = measure(fake.run, batch_size=1, warmup_iters=0, warmup_s=0, iters=100, budget_s=None,
                clock=fake.clock).to_dict()["latency_ms"]
    assert d["p50"] == pytest.approx(50.5) and d["p90"] == pytest.approx(90.1) and d["p99"] == pytest.approx(99.01)
    assert d["min"] == pytest.approx(1.0) and d["max"] == pytest.approx(100.0)


def test_unstable_runs_are_flagged():
    noisy = LatencyStats([10.0, 30.0] * 10, 1)
    assert noisy.cv > UNSTABLE_CV and noisy.to_dict()["unstable"] is True


def test_sync_runs_inside_each_timed_sample():
    fake = FakeRunner([0.001])
    synced = []
    measure(fake.run, batch_size=1, warmup_iters=2, warmup_s=0, iters=3, budget_s=None,
            sync=lambda: synced.append(fake.calls), clock=fake.clock)
    assert synced == [1, 2, 3, 4, 5]


def test_needs_a_stopping_rule():
    with pytest.raises(ValueError):
        measure(lambda: None, batch_size=1, iters=None, budget_s=None)
