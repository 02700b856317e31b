"""The statistics behind bench's verdicts: how much slower one set of timings is than another, with
a confidence interval.

Every comparison works on log latencies, so a shift is a ratio (1.10 = 10 % slower) and a slow
phase that multiplies both sides by the same factor cancels.

Why rank statistics, not a bootstrap: the estimate is the Hodges-Lehmann shift (the median of the
pairwise differences) and its interval comes from the exact distribution of the Wilcoxon signed-rank
statistic (paired rounds) or the Mann-Whitney U statistic (two unpaired sets of rounds).
- The interval is distribution-free and exact at the 8-30 rounds a bench run has; a percentile
  bootstrap of a median is discrete and too narrow at these sizes, so it would fail unchanged code
  more often than its nominal 2.5 %.
- It is robust: up to 29 % of the rounds may be arbitrarily wrong (a pair that straddled the start
  of a noise phase) without carrying the estimate with them.
- The signed-rank interval assumes the paired differences are symmetric about their centre; bench
  runs the two sides of a pair in random order each round, so a noise phase that begins between
  them is as likely to hit either side, which is what makes the outliers symmetric.
- It is deterministic: the same timings give the same verdict, with no random resampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from vitexport.core.roundstats import median, relative_spread  # noqa: F401  (the statistics a package carries)

CONFIDENCE = 0.95
EXACT_PAIRS = 60  # the signed-rank distribution is counted exactly up to this many pairs, then approximated
EXACT_PRODUCT = 2500  # likewise Mann-Whitney's, up to m x n


@dataclass(frozen=True)
class Shift:
    """How many times larger one side's timings are than the other's: `ratio` (Hodges-Lehmann), the
    interval [low, high] at `confidence` (None where too few rounds allow one), and the sizes."""

    ratio: float
    low: float | None
    high: float | None
    sizes: tuple[int, ...]
    confidence: float = CONFIDENCE

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def beyond(self, limit: float) -> bool:
        """The whole interval lies above `limit` (a ratio such as 1.05)."""
        return self.low is not None and self.low > limit

    def within(self, limit: float) -> bool:
        """The whole interval lies at or below `limit`: a slowdown beyond it is ruled out."""
        return self.high is not None and self.high <= limit

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "sizes": list(self.sizes),
                "confidence": self.confidence}


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


@lru_cache(maxsize=None)
def signed_rank_counts(n: int) -> tuple[int, ...]:
    """counts[t] = how many of the 2^n sign patterns give signed-rank sum t: the coefficients of
    prod_{i=1..n} (1 + q^i)."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    top = 0
    for i in range(1, n + 1):
        top += i
        for t in range(top, i - 1, -1):
            counts[t] += counts[t - i]
    return tuple(counts)


@lru_cache(maxsize=None)
def rank_sum_counts(m: int, n: int) -> tuple[int, ...]:
    """counts[u] = how many of the C(m+n, m) orderings give Mann-Whitney U = u: the coefficients of
    the Gaussian binomial [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)."""
    size = m * n + 1
    poly = [1] + [0] * (size - 1)
    for i in range(1, m + 1):
        for t in range(size - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            poly[t] -= poly[t - n - i]
        for t in range(i, size):  # divided by (1 - q^i): a running sum with stride i
            poly[t] += poly[t - i]
    return tuple(poly)


def _rank_of_bound(counts: tuple[int, ...], confidence: float) -> int | None:
    """The k (1-based) whose order statistics [k, M + 1 - k] bound the interval: the largest k with
    P(statistic <= k - 1) <= (1 - confidence) / 2; None when even k = 1 is too likely."""
    total, tail, k = sum(counts), 0, 0
    limit = (1 - confidence) / 2 * total
    for t, c in enumerate(counts):
        if tail + c > limit:
            break
        tail += c
        k = t + 1
    return k or None


def _normal_rank(mean: float, sd: float, confidence: float) -> int | None:
    k = math.floor(mean - _z(confidence) * sd)  # continuity-corrected normal approximation
    return k if k >= 1 else None


def _interval(sorted_values: list[float], k: int | None) -> tuple[float | None, float | None]:
    if k is None:
        return None, None
    return sorted_values[k - 1], sorted_values[len(sorted_values) - k]


def paired_ratio(candidate: list[float], baseline: list[float], confidence: float = CONFIDENCE) -> Shift:
    """candidate / baseline from timings paired by round: the Hodges-Lehmann estimate of the
    log-ratio (the median of the Walsh averages) and its Wilcoxon signed-rank interval."""
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError("paired timings need the same, non-zero number of rounds on both sides")
    logs = [math.log(c / b) for c, b in zip(candidate, baseline)]
    return _one_sample(logs, confidence)


def ratio_to(values: list[float], reference: float, confidence: float = CONFIDENCE) -> Shift:
    """values / reference, when the reference is one number (an older report without its rounds)."""
    return _one_sample([math.log(v / reference) for v in values], confidence)


def _one_sample(logs: list[float], confidence: float) -> Shift:
    n = len(logs)
    walsh = sorted((logs[i] + logs[j]) / 2 for i in range(n) for j in range(i, n))
    if n <= EXACT_PAIRS:
        k = _rank_of_bound(signed_rank_counts(n), confidence)
    else:
        k = _normal_rank(n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24), confidence)
    low, high = _interval(walsh, k)
    return Shift(math.exp(median(walsh)), _exp(low), _exp(high), (n,), confidence)


def ratio_shift(now: list[float], before: list[float], confidence: float = CONFIDENCE) -> Shift:
    """now / before from two unpaired sets of timings: the Hodges-Lehmann two-sample estimate of
    the log shift (the median of all differences) and its Mann-Whitney interval."""
    if not now or not before:
        raise ValueError("a shift needs timings on both sides")
    a, b = [math.log(v) for v in now], [math.log(v) for v in before]
    diffs = sorted(x - y for x in a for y in b)
    m, n = len(a), len(b)
    if m * n <= EXACT_PRODUCT:
        k = _rank_of_bound(rank_sum_counts(min(m, n), max(m, n)), confidence)
    else:
        k = _normal_rank(m * n / 2, math.sqrt(m * n * (m + n + 1) / 12), confidence)
    low, high = _interval(diffs, k)
    return Shift(math.exp(median(diffs)), _exp(low), _exp(high), (m, n), confidence)


def _exp(value: float | None) -> float | None:
    return None if value is None else math.exp(value)
