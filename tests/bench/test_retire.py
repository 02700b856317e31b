"""Rows that cannot win stop taking turns (`bench(..., retire_slower=...)`, what optimize uses): the
A/B gate's paired verdict on per-round medians decides, never a single slow round."""

from __future__ import annotations

import itertools

from vitexport.bench.rounds import Cell, Rounds
from vitexport.bench.session import RETIRE_PAIRS, SCREEN_ROUNDS, retire_behind


class Steady:
    """A stand-in worker whose bursts take `ms` (times a per-round wobble shared by every worker, as a
    noisy machine slows everyone at once)."""

    wobble = itertools.cycle([1.0, 1.3, 0.9, 1.1, 1.0, 1.2, 0.95, 1.05])

    def __init__(self, ms: float, log: list):
        self.ms, self.log = ms, log

    def ask(self, op, **fields):
        self.log.append(self)
        factor = next(Steady.wobble)
        return {"ok": True, "samples_ms": [self.ms * factor] * 3, "rss_mb": 10.0}


def cells(*ms: float, batch: int = 1) -> tuple[list[Cell], list]:
    log: list = []
    return [Cell(f"c{i}", Steady(m, log), batch) for i, m in enumerate(ms)], log


def test_a_row_clearly_slower_than_the_fastest_stops_after_enough_rounds():
    (fast, close, slow), log = cells(10.0, 10.4, 30.0)
    Rounds({"ms": 10}, seed=0).run([fast, close, slow], 20, retire=lambda live: retire_behind(live, 1.10))
    assert slow.retired and "beyond 1.10x" in slow.retired and len(slow.medians) == RETIRE_PAIRS
    assert fast.retired is None and close.retired is None  # 4 % behind: not beyond 10 %
    assert len(fast.medians) == len(close.medians) == 20


def test_nothing_is_retired_before_the_gate_has_its_rounds():
    (fast, slow), _ = cells(10.0, 30.0)
    for i in range(RETIRE_PAIRS - 1):
        fast.medians.append(10.0)
        slow.medians.append(30.0)
    retire_behind([fast, slow], 1.10)
    assert slow.retired is None


def test_one_round_within_the_limit_keeps_a_row_in_until_the_interval_lies_beyond_it():
    """After RETIRE_PAIRS rounds the interval's low end is the smallest round's ratio: one round that
    puts the row within 10 % of the fastest keeps it taking turns; more rounds narrow the interval."""
    (fast, slow), _ = cells(10.0, 30.0)
    for ratio in [1.05] + [3.0] * (RETIRE_PAIRS - 1):
        fast.medians.append(10.0)
        slow.medians.append(10.0 * ratio)
    retire_behind([fast, slow], 1.10)
    assert slow.retired is None
    for _ in range(2):
        fast.medians.append(10.0)
        slow.medians.append(30.0)
    retire_behind([fast, slow], 1.10)
    assert slow.retired and f"after {RETIRE_PAIRS + 2} rounds" in slow.retired


def test_rows_are_compared_within_their_batch_size_only():
    (one,), _ = cells(10.0, batch=1)
    (eight,), _ = cells(60.0, batch=8)
    for _ in range(RETIRE_PAIRS):
        one.medians.append(10.0)
        eight.medians.append(60.0)
    retire_behind([one, eight], 1.10)
    assert one.retired is None and eight.retired is None


def test_without_a_limit_every_row_runs_every_round():
    (fast, slow), _ = cells(10.0, 30.0)
    Rounds({"ms": 10}, seed=0).run([fast, slow], 12)
    assert len(slow.medians) == 12 and slow.retired is None


def test_the_screen_stops_a_row_far_behind_after_its_first_rounds():
    (fast, close, slow), log = cells(10.0, 15.0, 30.0)
    Rounds({"ms": 10}, seed=0).run([fast, close, slow], 12,
                                   retire=lambda live: retire_behind(live, 1.10, screen=2.0))
    assert len(slow.medians) == SCREEN_ROUNDS and "beyond the screen's 2.00x" in slow.retired
    # 1.5x behind: within the screen, so only the gate's paired interval stops it, after its rounds.
    assert "beyond 1.10x" in close.retired and len(close.medians) == RETIRE_PAIRS
    assert fast.retired is None and len(fast.medians) == 12


def test_one_round_within_the_screen_keeps_a_row_for_the_gate():
    """A row 3x behind in one round and 1.5x in the other (the fastest caught in a fast phase once) is
    not screened out: every screening round must put it beyond the screen."""
    (fast, slow), _ = cells(10.0, 30.0)
    for ratio in (3.0, 1.5):
        fast.medians.append(10.0)
        slow.medians.append(10.0 * ratio)
    retire_behind([fast, slow], 1.10, screen=2.0)
    assert slow.retired is None
    retire_behind([fast, slow], 1.10)
    assert slow.retired is None  # and without a screen nothing stops before the gate's rounds


def test_optimize_screens_beyond_the_noise_of_a_shared_machine():
    from vitexport import optimize

    # A runtime's timings move by up to 45 % for tens of seconds on a shared 2-vCPU machine.
    assert optimize.RETIRE_SCREEN >= 1.45 * 1.3 and optimize.RETIRE_SLOWER < optimize.RETIRE_SCREEN
