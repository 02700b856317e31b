"""The HTML report's charts as inline SVG, drawn here so that the page needs no script library and no
network: latency vs cosine (or accuracy) with the Pareto front, and a row's p50 over time.

This module does the arithmetic (where each tick, point and line goes); templates/charts.svg draws
it, escaping every label. Marks are told apart by shape as well as colour (filled circle verified,
square the PyTorch reference, cross failed, hollow circle unverified, a ring on the front), every
point carries a `<title>` that browsers show on hover, and a number that the legend beside the plot
and the table under the chart name.

Closeness to PyTorch is drawn as the distance 1 − cosine on a log scale, closest at the top: cosines
of 0.99999999999967 and 1.0 differ in the thirteenth digit, which a linear cosine axis cannot show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from vitexport.core.words import milliseconds
from vitexport.report.page import FAILED, REFERENCE, UNVERIFIED, Point, Series, cosine_words

W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 16, 44
LEGEND_W, LEGEND_ROW, LEGEND_CHARS = 290, 16, 44  # the legend beside a scatter: width, line height, label length
# The distance 1 − cosine drawn for exact agreement: a decade below the closest artifact, and never
# below what a float64 cosine can resolve.
FLOOR = 1e-16


@dataclass(frozen=True)
class Box:
    """The drawing's size and margins, as the template needs them."""

    w: int = W
    h: int = H
    left: int = LEFT
    right: int = RIGHT
    top: int = TOP
    bottom: int = BOTTOM
    view_w: int = W  # the whole drawing, legend included
    view_h: int = H


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _log_ticks(low: float, high: float) -> list[float]:
    ticks = []
    for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        ticks += [m * 10 ** e for m in (1, 2, 5) if low <= m * 10 ** e <= high]
    return ticks or [low, high]


def _labels(values: list[float]) -> list[str]:
    """Tick labels in six significant digits, or as many more as tell every tick apart (ticks
    0.9999999 and 1.0 are not both "1")."""
    for digits in range(6, 17):
        labels = [f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:.0f}" for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(v) for v in values]


@dataclass
class Tick:
    at: float  # x (an x tick) or y (a y tick) in the drawing
    text: str


@dataclass
class Frame:
    """The plot area, its grid lines with their numbers, and the axis labels."""

    x_ticks: list[Tick]
    y_ticks: list[Tick]
    x_label: str
    y_label: str


@dataclass
class Mark:
    """One drawn point: where, how (its check's status) and what hovering it says."""

    x: float
    y: float
    status: str
    key: str
    words: str
    number: int  # the point's number in the table under the chart (scatter) or the report's (history)
    front: bool = False
    low: float = 0.0  # history: the whisker's ends
    high: float = 0.0

    @property
    def shape(self) -> str:
        return {FAILED: "cross", REFERENCE: "square"}.get(self.status, "circle")

    @property
    def kind(self) -> str:
        """The mark's class: its status, where a circle is either verified or not."""
        if self.status in (FAILED, REFERENCE, UNVERIFIED):
            return self.status
        return "verified"


@dataclass
class Chart:
    title: str
    description: str
    frame: Frame
    marks: list[Mark]
    line: str = ""  # scatter: the front's staircase (path data); history: the trend (polyline points)
    box: Box = field(default_factory=Box)
    legend: list[Entry] = field(default_factory=list)  # scatter: every drawn point by number and name
    note: str = ""  # what the reader needs to read the axes (the floor of the distance axis)


class Axes:
    """Maps data to the drawing area; latency on a log scale once it spans more than a decade."""

    def __init__(self, xs: Iterable[float], ys: Iterable[float], y_max: float | None = None):
        xs, ys = list(xs), list(ys)
        self.log = min(xs) > 0 and max(xs) / min(xs) > 10
        lo, hi = min(xs), max(xs)
        if self.log:
            self.x0, self.x1 = math.log10(lo) - 0.05, math.log10(hi) + 0.05
        else:
            pad = (hi - lo) * 0.08 or max(hi * 0.1, 1e-3)
            self.x0, self.x1 = max(0.0, lo - pad), hi + pad
        lo, hi = min(ys), max(ys) if y_max is None else max(max(ys), y_max)
        pad = (hi - lo) * 0.08 or max(abs(hi) * 1e-4, 1e-6)
        self.y0, self.y1 = lo - pad, hi + pad

    def x(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return LEFT + (v - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return H - BOTTOM - (value - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM)

    def x_ticks(self) -> list[float]:
        if self.log:
            return _log_ticks(10 ** self.x0, 10 ** self.x1)
        return [t for t in _nice_ticks(self.x0, self.x1) if t >= self.x0]

    def frame(self, x_label: str, y_label: str, x_ticks: bool = True, y_ticks: list[Tick] | None = None) -> Frame:
        xs = self.x_ticks() if x_ticks else []
        ys = _nice_ticks(self.y0, self.y1, 4)
        return Frame(x_ticks=[Tick(self.x(t), text) for t, text in zip(xs, _labels(xs))],
                     y_ticks=y_ticks if y_ticks is not None else
                     [Tick(self.y(t), text) for t, text in zip(ys, _labels(ys))],
                     x_label=x_label + (" (log scale)" if self.log else ""), y_label=y_label)


class Distance:
    """The cosine chart's y axis: 1 − cosine on a log scale, the closest at the top. Exact agreement
    (and anything closer than the floor) is drawn at the floor, which the chart's note names."""

    def __init__(self, cosines: Iterable[float]):
        gaps = [1.0 - c for c in cosines if c < 1.0]
        self.floor = max(FLOOR, 10.0 ** (math.floor(math.log10(min(gaps))) - 1)) if gaps else FLOOR
        low = math.log10(self.floor)
        high = max([math.log10(g) for g in gaps] + [low + 1])
        self.y0, self.y1 = low - 0.15, high + 0.15  # y0 at the top

    def gap(self, cosine: float) -> float:
        return max(1.0 - cosine, self.floor)

    def y(self, cosine: float) -> float:
        return TOP + (math.log10(self.gap(cosine)) - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM)

    def ticks(self) -> list[Tick]:
        """One tick per decade, or per few decades where many are spanned (at most six ticks)."""
        first, last = math.ceil(self.y0), math.floor(self.y1)
        step = max(1, math.ceil((last - first + 1) / 6))
        return [Tick(TOP + (e - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM), f"1e{e}")
                for e in range(first, last + 1, step)]


@dataclass
class Entry:
    """One line of a scatter's legend: the point's mark, drawn small, and its number and name."""

    mark: Mark
    text: str


def _legend(marks: list[Mark], labels: list[str]) -> list[Entry]:
    entries = []
    for i, (m, label) in enumerate(zip(marks, labels)):
        text = f"{m.number}. {label}"
        text = text if len(text) <= LEGEND_CHARS else text[:LEGEND_CHARS - 1] + "…"  # hovering gives it whole
        at = Mark(x=W + 14, y=TOP + 8 + i * LEGEND_ROW, status=m.status, key=m.key, words=m.words,
                  number=m.number, front=m.front)
        entries.append(Entry(at, text + ("" if m.status == "verified" else f" ({m.status})")))
    return entries


def scatter(points: list[Point], metric: str, title: str) -> Chart:
    """Latency (x) against closeness to PyTorch (`metric` "cosine": 1 − cosine on a log scale) or
    top-1 accuracy (`metric` "accuracy"), better upwards, for the points that have a value; the
    front's points are ringed and joined by a step line, and the legend names every point."""
    drawn = [p for p in points if p.value is not None]
    axes = Axes([p.latency for p in drawn], [p.value for p in drawn])
    y, y_ticks, note = axes.y, None, ""
    if metric == "cosine":
        distance = Distance(p.value for p in drawn)
        y, y_ticks = distance.y, distance.ticks()
        y_label, words = "1 − cosine to PyTorch (log scale)", cosine_words
        note = f"A cosine of exactly 1 (no difference from PyTorch) is drawn at the floor, 1 − cosine = {distance.floor:.0e}."
    else:
        y_label, words = "top-1 accuracy on the labelled images", lambda v: f"{v:.6g}"
    front = sorted((p for p in drawn if p.front), key=lambda p: p.latency)
    path = ""
    if len(front) > 1:
        path = f"M{axes.x(front[0].latency):.1f} {y(front[0].value):.1f}"
        for p in front[1:]:  # a staircase: what is reachable at no more than each latency
            path += f"H{axes.x(p.latency):.1f}V{y(p.value):.1f}"
    marks = [Mark(x=axes.x(p.latency), y=y(p.value), status=p.status, key=p.key, number=n, front=p.front,
                  words=(f"{n}. {p.label}: p50 {milliseconds(p.latency)}, {metric} {words(p.value)}, {p.status}"
                         + (", on the Pareto front" if p.front else "")))
             for n, p in enumerate(points, 1) if p.value is not None]
    legend = _legend(marks, [p.label for p in drawn])
    on_front = ", ".join(p.label for p in front) or "none"
    box = Box(view_w=W + LEGEND_W, view_h=max(H, TOP + 8 + len(legend) * LEGEND_ROW))
    return Chart(title=title, frame=axes.frame("p50 latency, ms (lower is better)", f"{y_label}, better upwards",
                                               y_ticks=y_ticks),
                 marks=marks, line=path if len(front) > 1 else "", box=box, legend=legend, note=note,
                 description=f"{len(drawn)} timed artifacts; Pareto front of verified ones: {on_front}. {note} "
                             "The legend names every point; the table below lists them.")


def history_chart(series: Series, title: str) -> Chart:
    """A row's p50 in each report, oldest left, with a whisker over its rounds' spread."""
    pts = series.points
    axes = Axes(range(len(pts)), [v for p in pts for v in (p["low"], p["high"])])
    axes.log, axes.x0, axes.x1 = False, -0.5, len(pts) - 0.5
    marks = [Mark(x=axes.x(i), y=axes.y(p["p50"]), status="verified", key=f"{series.name}|{i}", number=i + 1,
                  low=axes.y(p["low"]), high=axes.y(p["high"]),
                  words=(f"{p['when']} ({p['source']}): p50 {milliseconds(p['p50'])}, "
                         f"spread {p['low']:.3g}..{milliseconds(p['high'])}"))
             for i, p in enumerate(pts)]
    first, last = pts[0]["p50"], pts[-1]["p50"]
    return Chart(title=title, frame=axes.frame("report, oldest first", "p50 ms (lower is better)", x_ticks=False),
                 marks=marks, line=" ".join(f"{m.x:.1f},{m.y:.1f}" for m in marks),
                 description=f"p50 of {series.name} in {len(pts)} reports, from {milliseconds(first)} to {milliseconds(last)}.")

