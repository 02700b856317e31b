"""Regression gates: `bench --baseline` (artifacts measured in the same rounds, or a stored report)
and `verify --baseline` exit 5 when worse beyond the margin, 0 against themselves, say
"inconclusive" rather than "slower" when the machine was disturbed, and list what they could not
compare. Timings come from fake workers (tests/fake_workers.py): no wall clock decides an outcome."""

import copy
import json
import shutil

import numpy as np
import pytest
from fake_workers import Fake, Machine, install
from typer.testing import CliRunner

from vitexport.bench import regression
from vitexport.bench import run as benchrun
from vitexport.cli.app import app
from vitexport.core.errors import UsageError
from vitexport.verify import baseline as parity_gate

runner = CliRunner()
TINY = ["--config", "tiny", "--set", "depth=1"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


# --- the verdicts themselves, on synthetic rounds ------------------------------------------------------------

def medians(n, ms, sd=0.02, seed=0, slow=()):
    """Per-round medians around `ms`; rounds in `slow` run 1.5x (a vCPU taken away)."""
    noise = np.exp(np.random.default_rng(seed).normal(0, sd, n))
    return [float(ms * x * (1.5 if i in slow else 1.0)) for i, x in enumerate(noise)]


def refs(n, slow=(), ms=0.2):
    return [ms * (2.0 if i in slow else 1.0) for i in range(n)]


def row(backend, batch, rounds=None, references=None, available=True, precision="fp32", p50=None, **extra):
    if not available:
        return {"backend": backend, "batch_size": batch, "precision": precision, "available": False,
                "reason": "no GPU here"}
    rounds = rounds if rounds is not None else medians(20, 10.0)
    out = {"backend": backend, "batch_size": batch, "precision": precision, "available": True, "cv": 0.02,
           "latency_ms": {"p50": p50 if p50 is not None else float(np.median(rounds))}, **extra}
    if rounds:
        out["per_round"] = {"median_ms": rounds, "reference_ms": references or refs(len(rounds))}
    return out


def bench_report(rows, cpu="Xeon", threads=2, model="tiny", **fingerprint):
    return {"model": model, "input_shape": ["batch", 3, 224, 224], "settings": {"threads": threads},
            "fingerprint": {"cpu": cpu, "machine": "x86_64", "gpus": ["none"], "threads": threads, **fingerprint},
            "results": rows}


def verdict(now_rounds, now_refs, old_rounds, old_refs, margin=0.10):
    return regression.stored_verdict(row("torch", 1, now_rounds, now_refs), row("torch", 1, old_rounds, old_refs),
                                     1 + margin)


def test_a_stored_report_against_itself_is_within_the_margin():
    report = bench_report([row("torch", 1), row("onnxruntime", 1, medians(20, 8.0, seed=1)),
                           row("torch-cuda", 1, available=False)])
    comparison = regression.compare_bench(report, copy.deepcopy(report), "old.json")
    assert comparison["regressions"] == [] and comparison["inconclusive"] == []
    assert [c["verdict"] for c in comparison["compared"]] == ["ok", "ok"]
    assert all(r["vs_baseline"]["change"] == pytest.approx(0) for r in report["results"] if r["available"])


@pytest.mark.parametrize("ratio", [1.2, 1.33])
def test_a_real_slowdown_is_slower_against_a_stored_report(ratio):
    v = verdict(medians(20, 10.0 * ratio, seed=2), refs(20), medians(20, 10.0, seed=3), refs(20))
    assert v["verdict"] == "slower" and v["low"] > 1.10 and v["low"] < ratio < v["high"]
    assert v["normalised"]["low"] > 1.10


def test_a_disturbed_run_is_inconclusive_not_slower():
    """The whole run in a slow phase (the model 1.5x, the reference kernel 2x): never exit 5."""
    slow = range(20)
    v = verdict(medians(20, 10.0, seed=4, slow=slow), refs(20, slow), medians(20, 10.0, seed=5), refs(20))
    assert v["verdict"] == "undecided" and v["disturbed"] and v["ratio"] > 1.4
    report = bench_report([row("torch", 1, medians(20, 10.0, seed=4, slow=slow), refs(20, slow))])
    report["conditions"] = {"rounds": 20, "disturbed_rounds": 0, "phase_changes": 0, "steal": {"mean": 0.08}}
    comparison = regression.compare_bench(report, bench_report([row("torch", 1)]), "old.json")
    assert comparison["regressions"] == [] and [c["verdict"] for c in comparison["compared"]] == ["inconclusive"]
    message = regression.inconclusive_message(comparison)
    assert message.startswith("inconclusive: the machine was disturbed (now 0 of 20 rounds disturbed")
    assert "steal 8.0%" in message and "reference kernel ran 2.00x as long" in message


def test_disturbed_rounds_are_set_aside():
    """Half the rounds in a slow phase now: the undisturbed ones decide, and they are unchanged."""
    slow = set(range(5, 15))
    v = verdict(medians(20, 10.0, seed=6, slow=slow), refs(20, slow), medians(20, 10.0, seed=7), refs(20))
    assert v["verdict"] == "ok" and v["undisturbed_rounds"] == [10, 20]
    real = verdict(medians(20, 13.3, seed=6, slow=slow), refs(20, slow), medians(20, 10.0, seed=7), refs(20))
    assert real["verdict"] == "slower"


def test_a_baseline_from_a_slow_phase_cannot_vouch_for_a_run():
    """The baseline recorded while a vCPU was gone: everything now looks faster, a real slowdown too.
    The reference kernel says the states differ, normalised the rows differ: undecided, not ok."""
    slow = range(20)
    for ms in (10.0, 13.3):
        v = verdict(medians(20, ms, seed=8), refs(20), medians(20, 10.0, seed=9, slow=slow), refs(20, slow))
        assert v["verdict"] == "undecided" and v["disturbed"] and v["ratio"] < 0.9
        assert v["reference_ratio"] == pytest.approx(0.5) and "0.50x as long" in v["why"]


def test_too_few_undisturbed_rounds_cannot_decide():
    slow = set(range(2, 20))
    v = verdict(medians(20, 13.3, seed=10, slow=slow), refs(20, slow), medians(20, 10.0), refs(20))
    assert v["verdict"] == "undecided" and v["disturbed"] and "too few undisturbed rounds" in v["why"]


def test_a_spread_wider_than_the_margin_cannot_decide():
    v = verdict(medians(8, 10.9, sd=0.05, seed=11), refs(8), medians(8, 10.0, sd=0.05, seed=12), refs(8))
    assert v["verdict"] == "undecided" and not v.get("disturbed") and "spread between rounds" in v["why"]


def test_rounds_the_reference_kernel_missed_still_cannot_pass_for_quiet():
    """Every round of the baseline run disturbed by bursts of other work that fell between the
    reference readings: its rounds vary by a third. No verdict either way, a real slowdown or not."""
    noisy = [m * f for m, f in zip(medians(20, 10.0, seed=19), [1.0, 3.2, 2.9, 1.8, 3.3] * 4)]
    for ms in (10.0, 13.3):
        v = verdict(medians(20, ms, seed=20), refs(20), noisy, refs(20))
        assert v["verdict"] == "undecided" and v["disturbed"] and "still vary by" in v["why"]


def test_noise_on_one_side_blocks_only_the_verdict_it_could_have_invented():
    """Noise only adds time: rounds now that vary (disturbed in ways the reference kernel missed) may
    still show a row within the margin; a baseline that varies may still show a row slower."""
    bursts = [1.0, 1.4, 1.0, 1.3, 1.2] * 4
    noisy_now = [m * f for m, f in zip(medians(20, 7.0, seed=25), bursts)]
    quiet_then = medians(20, 10.0, seed=26)
    assert verdict(noisy_now, refs(20), quiet_then, refs(20))["verdict"] == "ok"
    assert verdict([m * 1.5 for m in noisy_now], refs(20), quiet_then, refs(20))["verdict"] == "undecided"
    noisy_then = [m * f for m, f in zip(medians(20, 10.0, seed=27), bursts)]
    assert verdict(medians(20, 18.0, seed=28), refs(20), noisy_then, refs(20))["verdict"] == "slower"
    assert verdict(medians(20, 10.0, seed=28), refs(20), noisy_then, refs(20))["verdict"] == "undecided"


def test_a_shift_no_disturbance_can_explain_is_slower_even_on_a_busy_machine():
    """Nearly every round disturbed on both sides, but every round now slower than every round then by
    more than the limit, normalised too: slower. A run slow throughout whose reference kernel slowed
    more than the model (normalised it is not slower) stays undecided."""
    busy = set(range(20)) - {13, 15}
    v = verdict(medians(20, 40.0, seed=21, slow=busy), refs(20, busy), medians(20, 10.0, seed=22, slow=busy),
                refs(20, busy))
    assert v["verdict"] == "slower" and "more than a disturbance can explain" in v["why"] and v["low"] > 2
    slow_run = medians(20, 20.0, sd=0.15, seed=23)  # rounds that vary: no quiet set to trust
    assert min(slow_run) > 1.1 * max(medians(20, 10.0, seed=24))
    v = verdict(slow_run, refs(20, ms=0.8), medians(20, 10.0, seed=24), refs(20))
    assert v["verdict"] == "undecided" and v["disturbed"]


def test_a_slow_phase_the_reference_kernel_understates_is_not_a_slowdown():
    """Seen on a shared VM: the same artifact ran 1.47x as long in a slow phase while the reference
    kernel ran 1.19x as long; normalised by the kernel it still looked 1.24x slower."""
    v = verdict(medians(8, 8.0 * 1.47, seed=30), refs(8, ms=0.14 * 1.19), medians(8, 8.0, seed=31), refs(8, ms=0.14))
    assert v["verdict"] == "undecided" and v["disturbed"], v


def test_a_slowdown_beyond_the_slow_phase_is_still_slower():
    """The artifact 1.4x slower, measured in that slow phase: beyond what the phase can explain."""
    v = verdict(medians(8, 8.0 * 1.4 * 1.47, seed=32), refs(8, ms=0.14 * 1.19), medians(8, 8.0, seed=33),
                refs(8, ms=0.14))
    assert v["verdict"] == "slower" and "the machine ran 1.19x slower" in v["why"], v


def test_a_report_without_rounds_is_compared_by_its_p50():
    old = row("torch", 1, rounds=[], p50=10.0)
    v = regression.stored_verdict(row("torch", 1, medians(20, 13.3, seed=13)), old, 1.10)
    assert v["verdict"] == "slower" and "keeps no rounds" in v["note"]
    assert regression.stored_verdict(row("torch", 1, medians(20, 10.0, seed=14)), old, 1.10)["verdict"] == "ok"


@pytest.mark.parametrize("ratio,expected", [(1.0, "ok"), (1.1, "slower"), (1.2, "slower"), (1.33, "slower")])
def test_ab_verdict_on_paired_rounds_through_phases(ratio, expected):
    """Both sides see the same phases (pairs run back to back): the phases cancel in the ratio."""
    slow = set(range(4, 12))
    base = medians(20, 10.0, seed=15, slow=slow)
    cand = [b * ratio * x for b, x in zip(base, np.exp(np.random.default_rng(16).normal(0, 0.02, 20)))]
    v = regression.ab_verdict(cand, base, 1.05)
    assert v["verdict"] == expected and v["low"] < ratio < v["high"]


def test_ab_verdict_needs_enough_pairs_and_a_clear_interval():
    assert regression.ab_verdict([1.3] * 5, [1.0] * 5, 1.05)["verdict"] == "undecided"
    straddle = regression.ab_verdict(medians(10, 10.5, sd=0.05, seed=17), medians(10, 10.0, sd=0.05, seed=18), 1.05)
    assert straddle["verdict"] == "undecided" and "reaches past" in straddle["why"]


def test_pairs_match_like_report_rows_then_by_kind():
    cand = [{**row("onnxruntime", 1), "artifact": "tiny.onnx"}, {**row("onnxruntime", 1), "artifact": "x-int8.onnx",
                                                                  "precision": "int8"},
            row("torch", 1), {**row("onnxruntime", 8), "artifact": "tiny.onnx"}]
    base = [{**row("onnxruntime", 1), "artifact": "tiny.onnx"}, {**row("onnxruntime", 1), "artifact": "main-int8.onnx",
                                                                  "precision": "int8"},
            row("torch", 1), {**row("torch", 4)}]
    pairs, unmatched = regression.pair_rows(cand, base)
    assert [(c.get("artifact"), b.get("artifact")) for c, b in pairs] == \
        [("tiny.onnx", "tiny.onnx"), (None, None), ("x-int8.onnx", "main-int8.onnx")]
    assert {(u["row"], u["side"]) for u in unmatched} == {("onnxruntime fp32 batch 8 (tiny.onnx)", "now"),
                                                          ("torch fp32 batch 4", "baseline")}


def test_rows_that_cannot_be_compared_are_listed_with_the_reason():
    old = bench_report([row("torch", 1), row("torch", 4), row("torch-cuda", 1),
                        row("onnxruntime", 1, available=False), row("torch", 8, precision="fp16")])
    new = bench_report([row("torch", 1), row("torch", 2), row("torch-cuda", 1, available=False),
                        row("onnxruntime", 1), row("torch", 8)])
    comparison = regression.compare_bench(new, old, "old.json")
    unmatched = {(u["row"], u["side"]): u["reason"] for u in comparison["unmatched"]}
    assert unmatched == {
        ("torch fp32 batch 2", "now"): "no such row in the baseline",
        ("torch-cuda fp32 batch 1", "now"): "could not run now: no GPU here",
        ("onnxruntime fp32 batch 1", "now"): "could not run in the baseline: no GPU here",
        ("torch fp32 batch 8", "now"): "no such row in the baseline",  # other precision: another row
        ("torch fp32 batch 4", "baseline"): "not measured now",
        ("torch fp16 batch 8", "baseline"): "not measured now",
    }
    assert [c["row"] for c in comparison["compared"]] == ["torch fp32 batch 1"]


def test_artifacts_of_one_backend_and_precision_are_told_apart():
    """int8 dynamic and static artifacts timed in one run: each is compared with itself only."""
    def rows(dynamic, static):
        return [{**row("onnxruntime", 1, medians(20, dynamic), precision="int8"), "artifact": "base-int8.onnx"},
                {**row("onnxruntime", 1, medians(20, static), precision="int8"), "artifact": "base-int8-static.onnx"}]

    comparison = regression.compare_bench(bench_report(rows(10.0, 20.0)), bench_report(rows(10.0, 10.0)), "old.json")
    assert [c["row"] for c in comparison["regressions"]] == ["onnxruntime int8 batch 1 (base-int8-static.onnx)"]
    assert len(comparison["compared"]) == 2 and comparison["unmatched"] == []


@pytest.mark.parametrize("field,old,new", [("cpu", "Xeon", "EPYC"), ("threads", 2, 4), ("gpus", ["none"], ["H100"]),
                                           ("jetson_power_mode", "MAXN", "15W"),
                                           ("jetson_clocks", "locked", "dynamic")])
def test_another_machine_or_setting_compares_nothing(field, old, new):
    kw_old, kw_new = {field: old}, {field: new}
    base = bench_report([row("torch", 1, medians(20, 1.0))],
                        **{k: v for k, v in kw_old.items() if k not in ("cpu", "threads")})
    now = bench_report([row("torch", 1, medians(20, 100.0))],
                       **{k: v for k, v in kw_new.items() if k not in ("cpu", "threads")})
    for report, kw in ((base, kw_old), (now, kw_new)):
        if "cpu" in kw:
            report["fingerprint"]["cpu"] = kw["cpu"]
        if "threads" in kw:
            report["settings"]["threads"] = report["fingerprint"]["threads"] = kw["threads"]
    comparison = regression.compare_bench(now, base, "old.json")
    assert comparison["regressions"] == [] and comparison["compared"] == []
    assert field in comparison["machine_differences"]
    assert comparison["unmatched"][0]["reason"].startswith(f"measured on a different setup: {field}")


def test_library_versions_may_differ():
    old = bench_report([row("torch", 1, medians(20, 10.0))], libraries={"torch": "2.13"}, os="Linux 6.1")
    new = bench_report([row("torch", 1, medians(20, 20.0))], libraries={"torch": "2.14"}, os="Linux 6.8")
    assert regression.compare_bench(new, old, "old.json")["regressions"]  # an upgrade's slowdown is caught


# --- bench --baseline REPORT: the command, with fake workers -------------------------------------------------

def bench_cli(tmp_path, name, *extra):
    out = tmp_path / name
    return invoke("bench", *TINY, "--backend", "torch", "--backend", "torch-cuda", "--batch", "1", "--batch", "2",
                  "--no-roofline", "--budget-s", "1", "--out", out, "--json-path", tmp_path / f"{name}.json", *extra)


def test_bench_against_its_own_report_exits_0(monkeypatch, tmp_path):
    install(monkeypatch)
    assert bench_cli(tmp_path, "first").exit_code == 0
    result = bench_cli(tmp_path, "second", "--baseline", tmp_path / "first.json")
    assert result.exit_code == 0, result.stderr
    data = json.loads((tmp_path / "second.json").read_text())
    ran = {f"{r['backend']} fp32 batch {r['batch_size']}" for r in data["results"] if r["available"]}
    assert {c["row"] for c in data["baseline"]["compared"]} == ran >= {"torch fp32 batch 1", "torch fp32 batch 2"}
    assert data["baseline"]["regressions"] == [] and data["baseline"]["inconclusive"] == []
    assert "vs base" in result.stdout and "within the margin: torch fp32 batch 1 " in result.stdout
    # torch-cuda without a GPU could not run on either side: listed, never silently dropped
    unmatched = {u["row"]: u["reason"] for u in data["baseline"]["unmatched"]}
    assert set(unmatched) == {f"torch-cuda fp32 batch {b}" for b in (1, 2)} - ran
    assert all(reason.startswith("could not run now") for reason in unmatched.values())
    assert all(f"not compared: {name}" in result.stdout for name in unmatched)


def test_bench_slower_than_a_forged_faster_baseline_exits_5_naming_the_row(monkeypatch, tmp_path):
    install(monkeypatch)
    assert bench_cli(tmp_path, "first").exit_code == 0
    forged = json.loads((tmp_path / "first.json").read_text())
    slow = next(r for r in forged["results"] if r["backend"] == "torch" and r["batch_size"] == 2)
    slow["per_round"]["median_ms"] = [m / 2 for m in slow["per_round"]["median_ms"]]  # batch 2 twice as fast
    slow["latency_ms"]["p50"] /= 2
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    result = bench_cli(tmp_path, "second", "--baseline", tmp_path / "forged.json")
    assert result.exit_code == 5, result.stderr
    assert "regression: slower than the baseline" in result.stderr
    assert "torch fp32 batch 2 2.0" in result.stderr and "x (95% interval " in result.stderr
    assert "limit 1.10x" in result.stderr
    assert "torch fp32 batch 1" not in result.stderr
    data = json.loads((tmp_path / "second.json").read_text())  # written, with the comparison, despite exit 5
    assert [c["row"] for c in data["baseline"]["regressions"]] == ["torch fp32 batch 2"]
    markdown = (tmp_path / "second" / "bench-tiny.md").read_text()
    assert "## Against the baseline" in markdown and "+10" in markdown and "%) > 10%" in markdown
    assert "slower: torch fp32 batch 2" in result.stdout
    # --max-slowdown above the change lets it pass
    assert bench_cli(tmp_path, "third", "--baseline", tmp_path / "forged.json", "--max-slowdown", "150").exit_code == 0


def test_a_disturbed_machine_gives_inconclusive_and_exit_0_after_measuring_again(monkeypatch, tmp_path):
    fake = install(monkeypatch)
    assert bench_cli(tmp_path, "first").exit_code == 0
    fake.machine = Machine([(1, 1.5, 2.0)])  # from now on a vCPU is gone: everything slower, the reference too
    before = sum(op == "burst" for op, _, _ in fake.log)
    result = bench_cli(tmp_path, "second", "--baseline", tmp_path / "first.json")
    assert result.exit_code == 0, result.stderr
    assert "warning: inconclusive: the machine was disturbed" in result.stderr
    data = json.loads((tmp_path / "second.json").read_text())
    assert [c["verdict"] for c in data["baseline"]["compared"]] == ["inconclusive", "inconclusive"]
    assert data["warnings"] and "inconclusive" in (tmp_path / "second" / "bench-tiny.md").read_text()
    rows = [r for r in data["results"] if r["available"]]
    assert all(r["rounds"] > data["settings"]["rounds"] for r in rows)  # measured again before giving up
    assert sum(op == "burst" for op, _, _ in fake.log) - before >= 2 * 3 * data["settings"]["rounds"]


@pytest.mark.parametrize("args,message", [
    (["--max-slowdown", "-5"], "--max-slowdown must be >= 0"),
    (["--max-slowdown", "nan"], "--max-slowdown must be a finite number"),
    (["--baseline", "{tmp}/missing.json"], "missing.json: it does not exist"),
    (["--baseline", "{tmp}/verify.json"], "is not a vitexport bench report"),
    (["--baseline", "{tmp}/merged.json"], "merges several machines"),
    (["--baseline", "{tmp}/verify.json", "--baseline", "{tmp}/merged.json"], "--baseline takes one bench report"),
    (["--baseline", "{tmp}/model.onnx"], "no sidecar model.onnx.json beside it"),
    (["--batch", "auto", "--baseline", "{tmp}/verify.json"], "--batch auto looks for a knee"),
    (["--latency-budget-ms", "50"], "--latency-budget-ms bounds the --batch auto sweep"),
    (["--batch", "x"], "--batch must be a whole number or auto"),
    (["--batch", "auto", "--batch", "2"], "--batch auto sweeps the batch itself"),
    (["--recheck-s", "-1"], "--recheck-s must be >= 0"),
    (["--baseline", "{tmp}/no_p50.json"], "no_p50.json: results[0]: ran (available) but has no latency_ms.p50"),
    (["--baseline", "{tmp}/bad_rounds.json"], "bad_rounds.json: results[0].per_round.median_ms[0]: 'x' is text, not a number"),
    (["--baseline", "{tmp}/not_rows.json"], "not_rows.json: results[0]: 7 is a whole number, not an object"),
])
def test_bad_baseline_options_exit_2_before_any_work(tmp_path, args, message, monkeypatch):
    monkeypatch.setattr(benchrun, "measure_all", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "verify.json").write_text(json.dumps({"backend": "onnx", "parity": {}}))
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    merged = {"schema": "vitexport.bench/1", "merged_from": ["a.json", "b.json"],
              "results": [{"backend": "torch", "batch_size": 1, "device_label": "A"}]}
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    ran = {"backend": "torch", "batch_size": 1, "precision": "fp32", "available": True}
    for name, row in (("no_p50", ran), ("bad_rounds", {**ran, "latency_ms": dict.fromkeys(("p50", "mean", "std", "min", "max", "p90", "p99"), 1.0),
                                                        "per_round": {"median_ms": ["x", -1]}})):
        (tmp_path / f"{name}.json").write_text(json.dumps({"schema": "vitexport.bench/1", "results": [row]}))
    (tmp_path / "not_rows.json").write_text(json.dumps({"schema": "vitexport.bench/1", "results": [7]}))
    result = invoke("bench", *TINY, "--out", tmp_path / "out", *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- bench --baseline ARTIFACT: A/B in one run -------------------------------------------------------------

@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory):
    """A fp32 ONNX artifact and its export --json output (the baseline users keep)."""
    out = tmp_path_factory.mktemp("onnx")
    result = invoke("onnx", *TINY, "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    (out / "export.json").write_text(result.stdout)
    return json.loads(result.stdout), out


def two_sides(onnx_export, tmp_path):
    """main/ and pr/: copies of one artifact, its sidecar beside each."""
    exported, _ = onnx_export
    art = exported["artifact"]
    for side in ("main", "pr"):
        (tmp_path / side).mkdir()
        for f in (art, art + ".json"):
            shutil.copy(f, tmp_path / side)
    name = art.rsplit("/", 1)[-1]
    return tmp_path / "pr" / name, tmp_path / "main" / name


def ab(tmp_path, cand, base, *extra):
    return invoke("bench", cand, "--backend", "onnxruntime", "--baseline", base, "--no-roofline", "--budget-s", "2",
                  "--out", tmp_path / "out", "--json-path", tmp_path / "ab.json", *extra)


@pytest.mark.parametrize("ratio,code", [(1.0, 0), (1.1, 5), (1.33, 5)])
def test_ab_against_an_artifact_through_noise_phases(monkeypatch, tmp_path, onnx_export, ratio, code):
    """The PR's artifact against main's, measured in the same rounds on a machine that loses a vCPU
    every few rounds: a real slowdown fails, an unchanged model passes."""
    fake = Fake(machine=Machine([(9, 1.0, 1.0), (15, 1.6, 2.0)] * 20),
                model_ms=lambda job, batch: 17.0 * (ratio if "/pr/" in str(job["artifact"]) else 1.0))
    install(monkeypatch, fake)
    cand, base = two_sides(onnx_export, tmp_path)
    result = ab(tmp_path, cand, base)
    assert result.exit_code == code, result.stderr
    data = json.loads((tmp_path / "ab.json").read_text())
    (c,) = data["baseline"]["compared"]
    assert c["low"] < ratio < c["high"] and c["rounds"] >= regression.MIN_PAIRS
    assert data["baseline"]["kind"] == "artifacts" and data["baseline"]["rows"][0]["available"]
    if code:
        assert f"{c['row']} {ratio:.2f}x" in result.stderr
    # the two sides ran back to back in every round: candidate and baseline bursts alternate in pairs
    model_workers = {w.id for w in fake.workers if w.job and w.job["kind"] == "model"}
    bursts = [wid for op, wid, _ in fake.log if op == "burst" and wid in model_workers]
    assert len(bursts) % 2 == 0 and all(a != b for a, b in zip(bursts[::2], bursts[1::2]))
    assert len({tuple(bursts[i:i + 2]) for i in range(0, len(bursts), 2)}) == 2  # the order varies


def test_ab_pairs_the_torch_rows_too_and_needs_both_sides(monkeypatch, tmp_path, onnx_export):
    fake = install(monkeypatch)
    fake.fail_open = lambda job: {"reason": "cannot load", "kind": "failed"} if "/main/" in str(job["artifact"]) \
        else None
    cand, base = two_sides(onnx_export, tmp_path)
    result = invoke("bench", cand, "--baseline", base, "--no-roofline", "--budget-s", "1", "--out", tmp_path / "o",
                    "--json-path", tmp_path / "ab.json")
    assert result.exit_code == 1, result.stderr  # the baseline's artifact could not run: no verdict possible
    assert "nothing could be timed" in result.stderr and "cannot load" in result.stderr
    # A failed run replaces nothing: no --json file, no report files; the table shows what happened.
    assert not (tmp_path / "ab.json").exists() and not list((tmp_path / "o").glob("bench-*"))
    assert "could not run (baseline): cannot load" in result.stdout


@pytest.mark.slow
def test_a_real_bench_against_a_forged_baseline(tmp_path):
    """Real workers: the row forged 100x faster fails, the row forged 100x slower passes."""
    args = ["bench", *TINY, "--backend", "torch", "--backend", "onnxruntime", "--batch", "1", "--iters", "16",
            "--warmup-iters", "1", "--warmup-s", "0", "--no-roofline", "--quiet"]
    assert invoke(*args, "--out", tmp_path / "a", "--json-path", tmp_path / "a.json").exit_code == 0
    forged = json.loads((tmp_path / "a.json").read_text())
    for r in forged["results"]:
        factor = 0.01 if r["backend"] == "onnxruntime" else 100
        r["per_round"]["median_ms"] = [m * factor for m in r["per_round"]["median_ms"]]
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    for attempt in range(3):  # a shared VM in a slow phase makes the stored gate say "inconclusive", by design
        result = invoke(*args, "--out", tmp_path / "b", "--json-path", tmp_path / "b.json",
                        "--baseline", tmp_path / "forged.json")
        if not (result.exit_code == 0 and "inconclusive: the machine was disturbed" in result.stderr):
            break
    else:
        pytest.skip("the machine stayed disturbed for three runs: the stored gate rightly decided nothing")
    assert result.exit_code == 5, result.stderr  # never "ok" for a row 100x slower
    data = json.loads((tmp_path / "b.json").read_text())
    row = "onnxruntime fp32 batch 1 (tiny-depth1-dynamic.onnx)"  # bench exports a dynamic batch, named so
    assert [c["row"] for c in data["baseline"]["regressions"]] == [row]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("regression:")]
    assert "onnxruntime fp32 batch 1 (tiny-depth1-dynamic.onnx)" in line and "torch fp32" not in line



def test_holding_verdicts_judge_memory_and_load_beyond_their_margins():
    from vitexport.bench import holding
    from vitexport.bench.regression import bench_message, key, name
    from vitexport.report.prose import baseline_lines

    def row(backend, anon, mapped, load):
        return {"backend": backend, "precision": "fp32", "batch_size": 1, "artifact": f"m.{backend}",
                "model_anon_mb": anon, "model_file_mb": mapped, "load_warm_s": load}

    now = [row("onnxruntime", 180.0, 0.0, 0.16), row("openvino", 95.0, 10.0, 2.5), row("coreml", None, None, None)]
    old = [row("onnxruntime", 90.0, 2.1, 0.04), row("openvino", 90.0, 5.0, 1.2), row("coreml", 5.0, 0.0, 0.1)]
    comparison = {"path": "old.json", "rule": "r", "compared": [{"row": name(key(r))} for r in now],
                  "regressions": [], "unmatched": []}
    verdicts = holding.judge(comparison, {name(key(r)): r for r in now}, {name(key(r)): r for r in old})
    got = {(v["row"].split()[0], v["kind"]): v["regressed"] for v in verdicts}
    # +88 MB of 92 is beyond +10 % and +16 MB; +10 MB of 95 is within; 0.04 -> 0.16 s (a loaded machine's
    # noise) is within 2x and +1 s, 1.2 -> 2.5 s beyond; a side without the numbers is not judged
    assert got == {("onnxruntime", "memory"): True, ("onnxruntime", "load"): False,
                   ("openvino", "memory"): False, ("openvino", "load"): True}
    assert [(v["row"].split()[0], v["kind"]) for v in comparison["costlier"]] == [("onnxruntime", "memory"),
                                                                                ("openvino", "load")]
    message = bench_message(comparison)
    assert message.startswith("costlier to hold or load than the baseline old.json: onnxruntime fp32 batch 1 (m.onnxruntime)"
                              ": the model holds 180 MB vs 92.1 MB, limit 108.1")
    assert "openvino fp32 batch 1 (m.openvino): a warm load takes 2.5 s vs 1.2 s, limit 2.4" in message
    lines = baseline_lines(comparison)
    assert sum(line.startswith("costlier: ") for line in lines) == 2
    assert sum(line.startswith("within the margin: ") and ("holds" in line or "load takes" in line)
               for line in lines) == 2


def test_a_bench_whose_model_grew_in_memory_is_a_regression(tmp_path, monkeypatch):
    """The run's own gate: a baseline whose onnxruntime model held nothing (margins set to none here,
    as a tiny model is within the default +16 MB) fails with exit 5; its latency, forged slower, passes."""
    from vitexport.bench import holding

    args = ["bench", *TINY, "--backend", "onnxruntime", "--batch", "1", "--iters", "16", "--warmup-iters", "1",
            "--warmup-s", "0", "--no-roofline", "--quiet"]
    assert invoke(*args, "--out", tmp_path / "a", "--json-path", tmp_path / "a.json").exit_code == 0
    forged = json.loads((tmp_path / "a.json").read_text())
    (row,) = forged["results"]
    if row.get("model_anon_mb") is None:
        pytest.skip("this platform gives no memory split (Linux's /proc does)")
    row.update(model_anon_mb=0.0, model_file_mb=0.0)
    row["per_round"]["median_ms"] = [m * 100 for m in row["per_round"]["median_ms"]]
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    monkeypatch.setattr(holding, "MEMORY_MARGIN", 0.0)
    monkeypatch.setattr(holding, "MEMORY_FLOOR_MB", 0.0)
    result = invoke(*args, "--out", tmp_path / "b", "--json-path", tmp_path / "b.json",
                    "--baseline", tmp_path / "forged.json")
    assert result.exit_code == 5, result.stderr
    baseline = json.loads((tmp_path / "b.json").read_text())["baseline"]
    assert baseline["regressions"] == [] and [v["kind"] for v in baseline["costlier"]] == ["memory"]
    assert "costlier to hold or load than the baseline" in result.stderr and "the model holds" in result.stderr

# --- verify --baseline ---------------------------------------------------------------------------------------

def test_verify_against_its_own_export_exits_0(onnx_export, tmp_path):
    exported, out = onnx_export
    result = invoke("verify", exported["artifact"], "--baseline", out / "export.json", "--json")
    assert result.exit_code == 0, result.stderr
    comparison = json.loads(result.stdout)["baseline"]
    names = {m["metric"] for m in comparison["metrics"]}
    assert {"max_abs_error", "mean_abs_error", "cosine_similarity", "top5_agreement"} <= names
    # Random weights on seeded inputs: PyTorch is decisive about none, so neither side has a top-1 number.
    assert "top1_agreement" not in names and not comparison["unmatched"]
    # The same numbers up to rounding: the export's PyTorch reference ran with its Linear weights laid out
    # for the ONNX exporter (the same values, another GEMM kernel), verify's with the model as built.
    assert comparison["regressions"] == [] and all(m["now"] == pytest.approx(m["baseline"], abs=1e-6)
                                                   for m in comparison["metrics"])
    # verify's own --json output is a baseline too
    (tmp_path / "verify.json").write_text(result.stdout)
    assert invoke("verify", exported["artifact"], "--baseline", tmp_path / "verify.json").exit_code == 0


def test_verify_worse_than_a_forged_better_baseline_exits_5(onnx_export, tmp_path):
    exported, out = onnx_export
    actual = exported["parity"]["max_abs_error"]
    noise = parity_gate.NOISE_SHARE * exported["parity"]["atol"]
    assert actual > 2 * parity_gate.ERROR_GROWTH * noise, "the artifact is too exact to forge a better baseline"
    forged = copy.deepcopy(exported)
    forged["parity"]["max_abs_error"] = actual / 100
    forged["parity"]["top1_agreement"] = 1.0
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    result = invoke("verify", exported["artifact"], "--baseline", tmp_path / "forged.json")
    assert result.exit_code == 5, result.stderr
    assert "regression: less accurate than the baseline" in result.stderr and "max_abs_error" in result.stderr
    assert "parity vs baseline" in result.stdout and "WORSE" in result.stdout and "PASSED" in result.stdout
    as_json = invoke("verify", exported["artifact"], "--baseline", tmp_path / "forged.json", "--json")
    assert as_json.exit_code == 5
    data = json.loads(as_json.stdout)  # stdout stays one JSON object, carrying the comparison
    assert [m["metric"] for m in data["baseline"]["regressions"]] == ["max_abs_error"]
    assert data["parity"]["passed"] is True
    # a looser growth factor accepts it
    loose = invoke("verify", exported["artifact"], "--baseline", tmp_path / "forged.json", "--max-error-growth", "1000")
    assert loose.exit_code == 0, loose.stderr


def test_parity_margins():
    parity = {"atol": 1e-4, "min_cosine": 0.99999}
    assert parity_gate._limit("max_abs_error", 1e-5, parity, 2.0) == pytest.approx(2e-5)
    assert parity_gate._limit("max_abs_error", 0.0, parity, 2.0) == pytest.approx(2e-7)  # exact baseline: noise floor
    assert parity_gate._limit("cosine_similarity", 1.0, parity, 2.0) == pytest.approx(1 - 2e-8)
    assert parity_gate._limit("top1_agreement", 0.75, parity, 2.0) == 0.75  # any drop is a different answer
    base = {"backend": "onnx", "precision": "fp32", "parity": {"max_abs_error": 1e-6, "top1_agreement": 1.0}}
    now = {"backend": "onnx", "precision": "fp32",
           "parity": {"max_abs_error": 1e-6, "top1_agreement": 0.9, "images": {"top1_agreement": 1.0}, **parity}}
    comparison = parity_gate.compare_parity(now, base, "old.json")
    assert [m["metric"] for m in comparison["regressions"]] == ["top1_agreement"]
    assert comparison["unmatched"] == [{"metric": "images.top1_agreement", "reason": "not in the baseline"}]


def test_verify_baseline_of_another_kind_exits_2_before_work(onnx_export, tmp_path):
    exported, out = onnx_export
    other = {**exported, "backend": "coreml", "precision": "fp16"}
    (tmp_path / "coreml.json").write_text(json.dumps(other))
    skipped = {**exported, "parity": {"passed": None, "skipped": "needs a GPU"}}
    (tmp_path / "skipped.json").write_text(json.dumps(skipped))
    (tmp_path / "bench.json").write_text(json.dumps({"schema": "vitexport.bench/1", "results": []}))
    for name, message in (("coreml.json", "is a coreml fp16 result; this artifact is onnx fp32"),
                          ("skipped.json", "holds no parity numbers"), ("bench.json", "is not a vitexport verify"),
                          ("missing.json", "missing.json: it does not exist")):
        result = invoke("verify", exported["artifact"], "--baseline", tmp_path / name)
        assert result.exit_code == 2 and message in result.stderr, (name, result.stderr)
    bad = invoke("verify", exported["artifact"], "--baseline", out / "export.json", "--max-error-growth", "0.5")
    assert bad.exit_code == 2 and "--max-error-growth must be >= 1" in bad.stderr


def test_load_parity_baseline_refuses_what_is_not_one(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="is not a vitexport verify or export"):
        parity_gate.load_parity_baseline(tmp_path / "list.json")


def test_a_bench_that_times_nothing_replaces_no_earlier_report(monkeypatch, tmp_path):
    fake = install(monkeypatch)
    assert bench_cli(tmp_path, "first").exit_code == 0
    written = [*sorted((tmp_path / "first").glob("bench-*")), tmp_path / "first.json"]
    before = {p: p.read_bytes() for p in written}
    fake.fail_open = lambda job: {"reason": "cannot load", "kind": "failed"}
    result = bench_cli(tmp_path, "first")
    assert result.exit_code == 1 and "nothing could be timed" in result.stderr, result.stderr
    assert {p: p.read_bytes() for p in written} == before  # the report set and --json PATH, untouched
    assert "reports: none written" in result.stdout
