"""Latency statistics with a fake clock: exact, and independent of how busy the machine is."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vitexport.backends.base import RunOptions
from vitexport.bench import measure as bench
from vitexport.bench.measure import first_inference_ms, peak_gpu_mb, peak_rss_mb, time_load
from vitexport.core.errors import UsageError
from vitexport.core.timing import UNSTABLE_CV, LatencyStats, WallTimer, measure, percentile


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
    code = ("import sys, json\nfrom vitexport.bench.measure import apply_threads\n"
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


# --- the worker: a persistent process answering one request at a time ------------------------------------

TESTS = Path(__file__).resolve().parents[1]  # the helpers (echo_backend.py) live in tests/


@pytest.fixture
def echo(monkeypatch):
    """Workers that can import tests/echo_backend.py; a job for it in a given mode."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), str(TESTS.parent),
                                                                     os.environ.get("PYTHONPATH")])))

    def job(mode="ok"):
        from vitexport.export.sidecar import ArtifactRecord, SourceRecord

        source = SourceRecord(spec={"model": "echo"}, kind="test", config=None, weights_sha256=None,
                              input_shape=[1, 3, 8, 8], preprocessing={})
        record = ArtifactRecord(backend="echo", artifact="", seed=0, precision="fp32", input_names=["x"],
                                output_names=["y"], input_shape=["batch", 3, 8, 8], dynamic_batch=True, options={},
                                info={"mode": mode}, source=source)
        return {"kind": "model", "backend": "echo", "module": "echo_backend", "artifact": None,
                "record": record.to_dict(), "threads": 1, "seed": 0, "run": vars(RunOptions())}

    return job


def test_a_worker_times_bursts_on_request_until_closed(echo):
    from vitexport.bench.rounds import WorkerProcess

    worker = WorkerProcess(1)
    try:
        opened = worker.ask("open", **echo("noisy"))  # what the runtime prints never reaches the replies
        assert opened["ok"] and opened["provider"] == "echo-cpu" and opened["load_s"] >= 0, opened
        assert opened["threads_applied"]["threads"] == 1
        first = worker.ask("prepare", batch=1, warmup_iters=2, warmup_s=0)
        assert first["ok"] and first["first_inference_ms"] > 0
        assert len(worker.ask("burst", batch=1, runs=3)["samples_ms"]) == 3
        assert len(worker.ask("burst", batch=1, ms=1)["samples_ms"]) >= 1  # a time budget: at least one run
        assert worker.ask("prepare", batch=2)["ok"] and len(worker.ask("burst", batch=2, runs=2)["samples_ms"]) == 2
        assert worker.ask("fly")["ok"] is False
        closed = worker.close()
        assert closed["ok"] and closed["peak_rss_mb"] > 1 and worker.proc.returncode == 0
    finally:
        worker.kill()


@pytest.mark.parametrize("mode,kind,text", [("unavailable", "unavailable", "echo needs a device"),
                                            ("broken", "failed", "RuntimeError: cannot parse the file")])
def test_a_worker_says_why_it_cannot_open(echo, mode, kind, text):
    from vitexport.bench.rounds import WorkerProcess

    worker = WorkerProcess(1)
    try:
        reply = worker.ask("open", **echo(mode))
        assert reply == {"ok": False, "kind": kind, "reason": reply["reason"]} and text in reply["reason"]
    finally:
        worker.kill()


def test_a_worker_that_dies_is_a_failed_burst_not_a_hang(echo):
    from vitexport.bench.rounds import WorkerProcess

    worker = WorkerProcess(1)
    try:
        assert worker.ask("open", **echo("dies"))["ok"]
        reply = worker.ask("prepare", batch=4)
        assert reply["ok"] is False and reply["reason"].startswith("worker exited 3") and worker.closed
        assert worker.ask("burst", batch=1, runs=1)["ok"] is False
    finally:
        worker.kill()


# --- rounds: who runs when ----------------------------------------------------------------------------------

class Recorder:
    """A stand-in worker: records its bursts in a shared log, answers with fixed samples."""

    def __init__(self, name, log, fail_at=None):
        self.name, self.log, self.fail_at, self.closed, self.count = name, log, fail_at, False, 0

    def ask(self, op, **f):
        self.log.append(self.name)
        self.count += 1
        if self.fail_at is not None and self.count >= self.fail_at:
            return {"ok": False, "kind": "failed", "reason": "worker exited -9: killed"}
        return {"ok": True, "samples_ms": [1.0, 2.0, 3.0], "rss_mb": 10.0}


def test_rounds_shuffle_the_order_keep_pairs_together_and_read_the_machine():
    from vitexport.bench.rounds import Cell, Probe, Rounds

    log = []
    a, b, c = (Cell(n, Recorder(n, log), 1) for n in "abc")
    a.pair = b.pair = 0
    gemms = [Probe(n, Recorder(n, log), {"runs": 2}, 1e9) for n in ("numpy", "torch")]
    rounds = Rounds({"ms": 10}, reference=Probe("ref", Recorder("ref", log), {"ms": 20}), gemms=gemms, seed=1,
                    gemm_bursts=3)
    rounds.run([a, b, c], 12)
    # every round: the reference, a group (the pair a+b back to back, or c), the reference, the other
    # group, the reference; then the GEMM bursts, 6 of them spread over the 12 rounds
    assert len(rounds.states) == 12 and all(s["reference_ms"] == 2.0 for s in rounds.states)
    models = [n for n in log if n in ("a", "b", "c", "ref")]
    orders = [tuple(models[i:i + 6]) for i in range(0, len(models), 6)]
    assert all(o[0] == "ref" and o[-1] == "ref" and sorted(o) == ["a", "b", "c", "ref", "ref", "ref"] for o in orders)
    assert all(abs(o.index("a") - o.index("b")) == 1 for o in orders)  # the pair is never split
    assert len(set(orders)) > 3  # the order changes from round to round
    assert [p.bursts for p in gemms] == [3, 3] and log.count("numpy") == 3
    assert a.medians == [2.0] * 12 and a.references == [2.0] * 12 and len(a.samples) == 36


def test_a_cell_that_fails_is_not_run_again():
    from vitexport.bench.rounds import Cell, Rounds

    log = []
    good, flaky = Cell("good", Recorder("good", log), 1), Cell("flaky", Recorder("flaky", log, fail_at=2), 1)
    Rounds({"ms": 10}, seed=0).run([good, flaky], 5)
    assert log.count("flaky") == 2 and log.count("good") == 5
    assert flaky.failure == {"reason": "worker exited -9: killed", "kind": "failed"} and len(flaky.medians) == 1


# --- bench: settings, strictness ------------------------------------------------------------------------------

def test_rounds_and_bursts_from_the_settings():
    from vitexport.bench.session import MIN_ROUNDS, Settings

    def settings(**kw):
        base = dict(threads=2, warmup_iters=0, warmup_s=0, iters=None, budget_s=5.0, seed=0, allow_fallback=False,
                    auto=False, batches=[1], rounds=None, latency_budget_ms=None, recheck_s=5.0, max_slowdown=None,
                    roofline=False)
        return Settings(**{**base, **kw})

    assert settings().round_count(False) == 20 and settings().burst(20) == {"ms": 250.0}
    assert settings(budget_s=0.5).round_count(False) == MIN_ROUNDS
    assert settings(iters=4).round_count(False) == 4 and settings(iters=4).burst(4) == {"runs": 1}
    assert settings(iters=4).round_count(True) == MIN_ROUNDS  # an A/B pair needs rounds for an interval
    assert settings(iters=100, rounds=3).burst(3) == {"runs": 34}


def test_rows_pool_their_rounds(monkeypatch, tmp_path):
    from fake_workers import install

    from vitexport import api
    from vitexport.models.sources import SourceSpec

    fake = install(monkeypatch)
    report = api.bench(SourceSpec("tiny", overrides={"depth": 1}), ["torch"], [1, 2], iters=4, warmup_iters=1,
                       warmup_s=0, budget_s=None, out_dir=tmp_path, roofline=False, rounds=2)
    assert [r["iterations"] for r in report["results"]] == [4, 4] and report["settings"]["rounds"] == 2
    row = report["results"][0]
    assert row["rounds"] == 2 and len(row["per_round"]["median_ms"]) == 2 == len(row["per_round"]["reference_ms"])
    assert row["available"] and row["latency_ms"]["p50"] == pytest.approx(10.0, rel=0.05)
    assert row["peak_rss_mb"] == 100.0 and row["first_inference_ms"] == 50.0 and "samples_ms" not in row
    conditions = report["conditions"]
    assert conditions["rounds"] == 2 and conditions["reference_kernel"]["what"] == "fake reference"
    assert len(conditions["per_round"]) == 2
    assert {"steal", "clock_ghz", "reference_ms"} <= set(conditions["per_round"][0])
    assert all(w.closed for w in fake.workers)


@pytest.mark.parametrize("together", [False, True])
def test_workers_load_in_turn_unless_started_together(monkeypatch, tmp_path, together):
    """One at a time, each load and first inference is timed alone and reported; together (optimize),
    every worker is asked to load before any answers, warm-ups still run in turn, and the load time
    and first inference, not measured alone, are left out."""
    from fake_workers import install

    from vitexport import api
    from vitexport.models.sources import SourceSpec

    fake = install(monkeypatch)
    report = api.bench(SourceSpec("tiny", overrides={"depth": 1}), ["torch"], [1, 2], iters=2, warmup_iters=1,
                       warmup_s=0, budget_s=None, out_dir=tmp_path, roofline=False, rounds=1,
                       start_together=together)
    opens = [i for i, w in enumerate(fake.wire) if w[:2] == ("send", "open")]
    first_reply = next(i for i, w in enumerate(fake.wire) if w[0] == "receive")
    assert (max(opens) < first_reply) is together
    prepares = [i for i, w in enumerate(fake.wire) if w[:2] == ("send", "prepare")]
    assert all(fake.wire[i + 1][0] == "receive" for i in prepares)  # each warm-up runs alone
    assert report["settings"]["workers_started"] == ("together" if together else "one at a time")
    for row in report["results"]:
        assert row["available"]
        assert (row["load_s"], row["first_inference_ms"]) == ((None, None) if together else (0.1, 50.0))


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    from vitexport import api
    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.models.sources import SourceSpec

    out = tmp_path_factory.mktemp("tiny")
    return Path(api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), OnnxOptions(), out)["artifact"])


def test_bench_refuses_a_changed_artifact_before_timing(tiny_onnx, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from vitexport.bench import run as benchrun
    from vitexport.cli.app import app

    monkeypatch.setattr(benchrun, "measure_all", lambda *a, **k: pytest.fail("timed a changed artifact"))
    changed = tmp_path / tiny_onnx.name
    changed.write_bytes(tiny_onnx.read_bytes() + b"\0")
    (tmp_path / f"{tiny_onnx.name}.json").write_bytes(Path(f"{tiny_onnx}.json").read_bytes())
    for args in ([changed], [tiny_onnx, "--baseline", changed]):
        result = CliRunner().invoke(app, ["bench", *map(str, args), "--backend", "onnxruntime", "--no-roofline",
                                          "--out", str(tmp_path / "out")])
        assert result.exit_code == 4, result.stderr
        assert f"{changed.name} is corrupt or changed since export (its sha256 differs from the sidecar's)" \
            in result.stderr


@pytest.mark.parametrize("failure,code", [({"reason": "no such device", "kind": "unavailable"}, 3),
                                          ({"reason": "cannot load it", "kind": "failed"}, 1)])
def test_nothing_that_was_asked_for_ran_exits_with_its_error_after_the_table(tiny_onnx, tmp_path, monkeypatch,
                                                                            failure, code):
    from fake_workers import install
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    fake = install(monkeypatch)
    fake.fail_open = lambda job: failure if job["backend"] == "onnx" else None
    result = CliRunner().invoke(app, ["bench", str(tiny_onnx), "--no-roofline", "--budget-s", "1", "--out",
                                      str(tmp_path / "out")])  # torch (rebuilt from the sidecar) runs; the artifact not
    assert result.exit_code == code, result.stderr
    assert f"nothing could be timed: onnxruntime ({tiny_onnx.name}): {failure['reason']}" in result.stderr
    assert "n/a" in result.stdout and "torch" in result.stdout  # the table came first


def test_rows_merely_unavailable_here_stay_n_a_when_others_ran(tmp_path, monkeypatch):
    from fake_workers import install
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    install(monkeypatch)
    base = ["bench", "--config", "tiny", "--set", "depth=1", "--no-roofline", "--budget-s", "1"]
    ok = CliRunner().invoke(app, base + ["--backend", "torch", "--backend", "torch-cuda", "--out", str(tmp_path / "a")])
    assert ok.exit_code == 0, ok.stderr
    none = CliRunner().invoke(app, base + ["--backend", "torch-cuda", "--out", str(tmp_path / "b")])
    assert none.exit_code == 3 and "nothing could be timed: torch-cuda" in none.stderr
