"""`bench --batch auto`: the knee of a throughput curve, found by doubling with paired rounds, on
synthetic curves (no timing): saturation, a latency budget, a drop, memory running short, a failure,
and noise phases that must not end the sweep early."""

import pytest

from vitexport.bench import sweep
from vitexport.bench.rounds import Cell


def saturating(batch):  # images/s: 400 b / (b + 4), gaining +67 %, +50 %, ... +6 % (64), +3 % (128)
    return 400.0 * batch / (batch + 4)


def driver(ips, phases=lambda r: 1.0, fail_at=None, rss_per_image=1.0, available=1e9, budget=None,
           max_batch=sweep.MAX_BATCH):
    """Run the sweep over fake cells whose per-run time follows `ips`; `phases(round)` slows both
    halves of a pair alike (a noise phase), as back-to-back bursts see."""
    state = {"round": 0}

    def new_cell(batch):
        cell = Cell(f"b{batch}", None, batch)
        if fail_at is not None and batch >= fail_at:
            cell.failure = {"reason": "out of memory", "kind": "failed"}
        return cell

    def pair(a, b, count):
        for _ in range(count):
            slow = phases(state["round"])
            state["round"] += 1
            for cell in (a, b) if b is not None else (a,):
                ms = 1000.0 * cell.batch / ips(cell.batch) * slow
                cell.samples += [ms] * 3
                cell.medians.append(ms)
                cell.rss_mb = 100.0 + rss_per_image * cell.batch

    def throughput(cell):
        mean = sum(cell.samples) / len(cell.samples)
        return cell.batch / (mean / 1000.0), sorted(cell.samples)[len(cell.samples) // 2]

    found, cells = sweep.run(new_cell(1), new_cell, pair, throughput, step_seconds=1e9, latency_budget_ms=budget,
                             max_batch=max_batch, memory=lambda: available)
    return found, cells


def test_doubling_stops_where_throughput_stops_improving():
    found, cells = driver(saturating)
    assert [s.batch for s in found.steps] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert found.stopped == "batch 128 gives +3% images/s over batch 64 (less than +5%)"
    knee = found.knee()
    assert knee.batch == 128 and knee.throughput_ips == pytest.approx(saturating(128))
    assert sorted(cells) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert found.steps[1].gain.ratio == pytest.approx(saturating(2) / saturating(1))


def test_a_latency_budget_ends_the_sweep_and_bounds_the_knee():
    # p50 at batch b is 1000 b / ips(b) ms: 30 ms at 8, 50 ms at 16
    found, _ = driver(saturating, budget=35.0)
    assert found.stopped == "batch 16: p50 50 ms is over the latency budget of 35 ms"
    assert found.knee(35.0).batch == 8


def test_a_drop_in_throughput_ends_it_and_the_knee_is_before_the_drop():
    found, _ = driver(lambda b: 100.0 * b if b <= 8 else 800.0 * 0.8)
    assert found.stopped.startswith("batch 16 gives -20% images/s") and found.knee().batch == 8


def test_memory_running_short_ends_it_before_the_next_batch_starts():
    found, cells = driver(saturating, rss_per_image=50.0, available=1000.0)
    # after batch 16 memory grew 50 MB per image: batch 32 would need 800 MB more, x1.5 headroom > 1000 MB
    assert found.stopped == "batch 32 would need about 800 MB more and 1000 MB are available"
    assert max(cells) == 16 and found.knee().batch == 16


def test_a_batch_that_fails_ends_it_with_the_reason():
    found, cells = driver(saturating, fail_at=32)
    assert found.stopped == "batch 32 failed: out of memory" and max(cells) == 16 and found.knee().batch == 16


def test_the_largest_batch_ends_it():
    found, _ = driver(saturating, max_batch=8)
    assert found.stopped == "batch 16 would pass the largest batch (8)" and found.knee().batch == 8


def test_noise_phases_do_not_end_the_sweep_early():
    """A slow phase of 1.8x that starts and ends between steps, and one in the middle of a step:
    paired rounds see it on both sides and the sweep ends where it would on a quiet machine."""
    quiet, _ = driver(saturating)
    noisy, _ = driver(saturating, phases=lambda r: 1.8 if (r // 5) % 2 else 1.0)
    assert [s.batch for s in noisy.steps] == [s.batch for s in quiet.steps]
    assert noisy.stopped == quiet.stopped and noisy.knee().batch == quiet.knee().batch


def test_batch_one_over_the_budget_has_no_knee():
    found, _ = driver(saturating, budget=1.0)
    assert found.stopped.startswith("batch 1: p50 12.5 ms is already over the latency budget")
    assert found.knee(1.0) is None


def test_memory_projection_needs_two_points():
    assert sweep.memory_short({1: 100.0}, 1, 10.0) is None
    assert sweep.memory_short({1: 100.0, 2: 150.0}, 2, None) is None
    assert sweep.memory_short({1: 100.0, 2: 150.0}, 2, 1000.0) is None


def test_bench_batch_auto_reports_the_knee_in_table_and_json(monkeypatch, tmp_path):
    import json

    from fake_workers import Fake, install
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    fake = install(monkeypatch, Fake(model_ms=lambda job, batch: 1000.0 * batch / saturating(batch)))
    result = CliRunner().invoke(app, ["bench", "--config", "tiny", "--set", "depth=1", "--backend", "torch",
                                      "--batch", "auto", "--latency-budget-ms", "35", "--no-roofline", "--budget-s",
                                      "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    data = json.loads((tmp_path / "out" / "bench-tiny.json").read_text())
    (found,) = data["sweeps"]
    assert found["knee_batch"] == 8 and found["knee_ips"] == pytest.approx(saturating(8), rel=0.03)
    assert found["stopped"].startswith("batch 16: p50") and [s["batch"] for s in found["steps"]] == [1, 2, 4, 8, 16]
    assert [(r["batch_size"], r["knee"]) for r in data["results"]] == [(1, False), (2, False), (4, False), (8, True),
                                                                        (16, False)]
    assert data["settings"]["batch"] == "auto" and data["settings"]["latency_budget_ms"] == 35
    assert "knee at batch 8" in result.stdout and "knee" in result.stdout.split("\n", 3)[2]  # a column too
    assert "## Throughput sweep" in (tmp_path / "out" / "bench-tiny.md").read_text()
    # one worker for the whole sweep: it was asked to prepare each new batch
    prepared = [b for op, _, b in fake.log if op == "prepare" and b]
    assert prepared == [1, 2, 4, 8, 16]


def step(batch, ips, ratio=None, low=None, high=None, p50=10.0):
    from vitexport.bench.stats import Shift
    from vitexport.bench.sweep import Step

    gain = None if ratio is None else Shift(ratio, low, high, (10, 10))
    return Step(batch, ips, p50, gain)


def test_a_step_whose_interval_includes_no_gain_is_not_the_knee():
    """+3 % with an interval reaching below 1 (a disturbed machine) is no gain: the knee stays where
    the table's images/s peak, and the sentence names that row."""
    from vitexport.bench.sweep import Sweep

    found = Sweep([step(1, 40.0), step(2, 55.0, 1.37, 1.30, 1.45), step(4, 64.53, 1.17, 1.10, 1.25),
                   step(8, 59.95, 1.03, 0.96, 1.11)])
    assert found.knee().batch == 4 and found.knee().throughput_ips == 64.53


def test_a_knee_the_rows_contradict_is_not_taken():
    from vitexport.bench.sweep import Sweep

    found = Sweep([step(1, 40.0), step(2, 39.0, 1.08, 1.02, 1.15)])  # paired says faster, its row says slower
    assert found.knee().batch == 1


def test_without_an_interval_a_gain_needs_the_minimum():
    from vitexport.bench.sweep import Sweep

    assert Sweep([step(1, 40.0), step(2, 41.2, 1.03)]).knee().batch == 1  # too few rounds for an interval
    assert Sweep([step(1, 40.0), step(2, 48.0, 1.2)]).knee().batch == 2
