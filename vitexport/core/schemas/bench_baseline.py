"""The comparison of a bench report with its baseline (`bench --baseline`): each row's latency verdict
and what its model costs to hold and load."""

from __future__ import annotations

from typing import Any, Literal, Optional

from vitexport.core.schemas.fields import Amount, Count, Ms, Number, Record, Share


class Compared(Record):
    """One row against its baseline row, with the verdict and its interval."""

    row: str
    baseline_row: Optional[str] = None
    verdict: Optional[str] = None
    why: Optional[str] = None
    regressed: Optional[bool] = None
    ratio: Optional[Amount] = None
    low: Optional[Amount] = None
    high: Optional[Amount] = None
    confidence: Optional[Share] = None
    rounds: Optional[Count | list[Count]] = None
    p50_ms: Ms
    baseline_p50_ms: Ms
    threshold: Number
    change: Optional[Number] = None


class Unmatched(Record):
    row: str
    side: Literal["now", "baseline"]
    reason: str


class Holding(Record):
    """One row's model memory (MB, anonymous plus mapped) or warm load (s) against its baseline's."""

    row: str
    kind: Literal["memory", "load"]
    now: Number
    baseline: Number
    limit: Number
    unit: Literal["MB", "s"]
    regressed: bool


class Baseline(Record):
    """The comparison with `bench --baseline`: the rule, every compared row, what could not be compared."""

    path: str
    kind: Optional[str] = None
    rule: str
    compared: list[Compared]
    regressions: list[Compared]
    undecided: list[Compared] = []
    inconclusive: list[Compared] = []
    unmatched: list[Unmatched] = []
    max_slowdown_pct: Optional[Number] = None
    machine_differences: Optional[dict[str, Any]] = None
    # What the model costs to hold and load against the baseline's (vitexport.bench.holding); the rows
    # beyond its margins again under costlier, which fails the gate as regressions do.
    holding: list[Holding] = []
    costlier: list[Holding] = []
