"""The statistics behind bench's verdicts, on synthetic timings: exact null distributions, intervals
that cover the truth, phases and outliers that do not move them, and A/A runs that stay within."""

import math
from math import comb

import numpy as np
import pytest

from vitexport.bench import stats


def test_null_distributions_are_exact():
    assert stats.signed_rank_counts(3) == (1, 1, 1, 2, 1, 1, 1)  # subsets of {1,2,3} by their sum
    for n in (1, 5, 12):
        assert sum(stats.signed_rank_counts(n)) == 2 ** n
    assert stats.rank_sum_counts(2, 3) == (1, 1, 2, 2, 2, 1, 1)
    for m, n in ((1, 1), (4, 6), (9, 7)):
        counts = stats.rank_sum_counts(m, n)
        assert sum(counts) == comb(m + n, m) and len(counts) == m * n + 1 and counts == counts[::-1]


def test_interval_ranks_match_the_tables():
    # Two-sided 95 %: with 8 pairs the critical signed-rank sum is 3 (P(T <= 3) = 5/256), so the interval
    # runs from the 4th smallest to the 4th largest Walsh average; with 5 + 5 rounds Mann-Whitney's is 2.
    assert stats._rank_of_bound(stats.signed_rank_counts(8), 0.95) == 4
    assert stats._rank_of_bound(stats.rank_sum_counts(5, 5), 0.95) == 3
    assert stats._rank_of_bound(stats.signed_rank_counts(5), 0.95) is None  # 1/32 > 2.5 %: no interval


def rounds(rng, n, ratio=1.0, sd=0.03, phases=False):
    """Paired per-round medians: a base latency, a common slow phase for some rounds, noise per side."""
    level = np.where((np.arange(n) // 5) % 2 == 1, 1.5, 1.0) if phases else np.ones(n)
    base = 17.0 * level * np.exp(rng.normal(0, sd, n))
    cand = 17.0 * ratio * level * np.exp(rng.normal(0, sd, n))
    return list(cand), list(base)


@pytest.mark.parametrize("ratio", [1.1, 1.2, 1.33])
def test_a_real_shift_is_found_through_noise_phases(ratio):
    cand, base = rounds(np.random.default_rng(1), 20, ratio, phases=True)
    shift = stats.paired_ratio(cand, base)
    assert shift.low < ratio < shift.high  # the truth is inside
    assert shift.beyond(1.05) and shift.high < ratio * 1.08


def test_a_and_a_through_bimodal_phases_stays_within_five_percent():
    cand, base = rounds(np.random.default_rng(2), 20, 1.0, phases=True)
    shift = stats.paired_ratio(cand, base)
    assert shift.low < 1.0 < shift.high and shift.within(1.05) and not shift.beyond(1.0)


def test_pairs_that_straddle_a_phase_change_do_not_carry_the_estimate():
    """A quarter of the pairs hit by a phase between their two halves, in either direction (the order
    within a pair is random), some wildly: the estimate and the interval stay near the truth."""
    rng = np.random.default_rng(3)
    cand, base = rounds(rng, 24, 1.2)
    for i, factor in zip(range(0, 24, 4), (1.6, 0.6, 1.7, 0.55, 3.0, 0.4)):
        cand[i] *= factor
    shift = stats.paired_ratio(cand, base)
    assert shift.ratio == pytest.approx(1.2, rel=0.03) and shift.low < 1.2 < shift.high and shift.beyond(1.1)


def test_unpaired_rounds_of_two_runs():
    rng = np.random.default_rng(4)
    before = list(17.0 * np.exp(rng.normal(0, 0.04, 16)))
    same = list(17.0 * np.exp(rng.normal(0, 0.04, 12)))
    slower = list(17.0 * 1.33 * np.exp(rng.normal(0, 0.04, 12)))
    assert stats.ratio_shift(same, before).within(1.10)
    found = stats.ratio_shift(slower, before)
    assert found.beyond(1.10) and found.low < 1.33 < found.high and found.sizes == (12, 16)
    # one wild round on either side does not move the estimate
    wild = stats.ratio_shift(same + [60.0], before + [5.0])
    assert wild.ratio == pytest.approx(stats.ratio_shift(same, before).ratio, rel=0.03)


def test_large_samples_use_the_normal_approximation_consistently():
    rng = np.random.default_rng(5)
    cand, base = rounds(rng, stats.EXACT_PAIRS + 20, 1.1)
    shift = stats.paired_ratio(cand, base)
    assert shift.low < 1.1 < shift.high and shift.high - shift.low < 0.05
    a, b = list(np.exp(rng.normal(0.1, 0.05, 60))), list(np.exp(rng.normal(0, 0.05, 50)))
    assert 60 * 50 > stats.EXACT_PRODUCT and stats.ratio_shift(a, b).low < math.exp(0.1) < stats.ratio_shift(a, b).high


def test_false_alarms_stay_at_the_nominal_rate():
    """200 seeded A/A comparisons of 12 pairs: an interval at 95 % excludes 1 in at most ~5 % of
    them (one side, as the gate uses it: at most ~2.5 %)."""
    rng = np.random.default_rng(6)
    above = 0
    for _ in range(200):
        cand, base = rounds(rng, 12, 1.0, sd=0.05, phases=True)
        above += stats.paired_ratio(cand, base).beyond(1.0)
    assert above <= 10


def test_too_few_rounds_give_no_interval():
    shift = stats.paired_ratio([2.0, 2.0, 2.1], [1.0, 1.0, 1.0])
    assert shift.ratio == pytest.approx(2.0, rel=0.05) and not shift.bounded
    assert not shift.beyond(1.05) and not shift.within(1.05)


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        stats.ratio_shift([], [1.0])


def test_relative_spread_ignores_one_wild_round():
    assert stats.relative_spread([10.0] * 9 + [100.0]) == 0.0
    assert stats.relative_spread([1.0]) is None
    assert stats.relative_spread([9.0, 10.0, 11.0]) == pytest.approx(0.14826)
