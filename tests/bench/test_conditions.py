"""The machine's state during a run: disturbed rounds, phase changes, and the summary reports carry."""

import pytest

from vitexport.bench import conditions


def test_rounds_whose_reference_kernel_slowed_are_disturbed():
    refs = [0.20, 0.21, 0.40, 0.42, 0.20, None, 0.19, 0.45]
    assert conditions.disturbed(refs) == [False, False, True, True, False, False, False, True]
    assert conditions.phase_changes(refs) == 3  # quiet -> slow -> quiet -> slow
    assert conditions.disturbed([None, None]) == [False, False]


def test_the_summary_keeps_every_round_and_sums_them_up():
    rounds = [{"reference_ms": r, "steal": s, "clock_ghz": 2.6, "seconds": 0.5}
              for r, s in ((0.2, 0.0), (0.4, 0.10), (0.25, 0.02))]
    c = conditions.summary(rounds, 2, {"what": "numpy float32 matmul 256³ on 2 threads", "flop": 2 * 256 ** 3})
    assert c["rounds"] == 3 and c["seconds"] == pytest.approx(1.5) and c["per_round"] is rounds
    assert c["steal"] == {"mean": pytest.approx(0.04), "max": 0.10}
    assert c["reference_kernel"]["ms"] == {"median": 0.25, "min": 0.2, "max": 0.4}
    assert c["reference_kernel"]["gflops"]["best"] == pytest.approx(2 * 256 ** 3 / 0.2 / 1e6)
    assert c["disturbed_rounds"] == 1 and c["phase_changes"] == 2
    text = conditions.describe(c)
    assert text.startswith("threads 2; 3 rounds in 2 s; steal 4.0% (max 10% in a round); reference kernel 134 GFLOP/s")
    assert text.endswith("2 phase changes, 1 of 3 rounds disturbed")
    assert conditions.describe(None) == ""


def test_the_conditions_of_several_runs_add_up_to_one_summary():
    """A matrix times each cell in a run of its own: its device's report sums them up."""
    reference = {"what": "numpy float32 matmul 256³ on 2 threads", "flop": 2 * 256 ** 3}
    quiet = conditions.summary([{"reference_ms": 0.2, "steal": 0.0, "clock_ghz": 2.6, "seconds": 1.0}] * 3, 2, reference)
    busy = conditions.summary([{"reference_ms": r, "steal": 0.2, "clock_ghz": 2.4, "seconds": 1.0}
                               for r in (0.2, 0.5)], 2, reference)
    c = conditions.combine([quiet, None, busy])  # a timing taken from an older cache kept none
    assert c["runs"] == 2 and c["rounds"] == 5 and c["seconds"] == pytest.approx(5.0)
    assert c["disturbed_rounds"] == 1 and c["phase_changes"] == 1
    assert c["steal"] == {"mean": pytest.approx(0.08), "max": 0.2}
    assert c["clock_ghz"]["min"] == 2.4 and c["clock_ghz"]["max"] == 2.6
    assert c["reference_kernel"]["ms"]["max"] == 0.5
    text = conditions.describe(c)
    assert text.startswith("threads 2; 5 rounds of 2 runs in 5 s; steal 8.0% (max 20% in a round)")
    assert text.endswith("1 phase change, 1 of 5 rounds disturbed")
    assert conditions.combine([None, None]) is None


def test_a_round_reads_steal_and_the_clock():
    state = conditions.RoundClock().finish(0.2)
    assert state["reference_ms"] == 0.2 and state["seconds"] >= 0
    assert state["steal"] is None or 0 <= state["steal"] <= 1
