"""The HTML report's charts as inline SVG, drawn here so that the page needs no script library and no
network: latency vs cosine (or accuracy) with the Pareto front, and a row's p50 over time.

Marks are told apart by shape as well as colour (filled circle verified, square the PyTorch
reference, cross failed, hollow circle unverified, a ring on the front), every point carries a
`<title>` that browsers show on hover, and a number that the table under the chart names.
"""

from __future__ import annotations

import math
from html import escape
from typing import Iterable

from vitexport.report.page import FAILED, REFERENCE, UNVERIFIED, Point, Series

W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 16, 44


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


def _fmt(value: float) -> str:
    return f"{value:.6g}" if abs(value) < 1000 else f"{value:.0f}"


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

    def frame(self, x_label: str, y_label: str, x_ticks: bool = True) -> list[str]:
        parts = [f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}"/>']
        for t in self.x_ticks() if x_ticks else ():
            x = self.x(t)
            parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}"/>'
                         f'<text class="tick" x="{x:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{_fmt(t)}</text>')
        for t in _nice_ticks(self.y0, self.y1, 4):
            y = self.y(t)
            parts.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                         f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
        scale = " (log scale)" if self.log else ""
        parts.append(f'<text class="label" x="{(LEFT + W - RIGHT) / 2}" y="{H - 6}" text-anchor="middle">'
                     f'{escape(x_label)}{scale}</text>'
                     f'<text class="label" transform="translate(14 {(TOP + H - BOTTOM) / 2}) rotate(-90)" '
                     f'text-anchor="middle">{escape(y_label)}</text>')
        return parts


def _mark(status: str, x: float, y: float) -> str:
    if status == FAILED:
        return (f'<path class="mark failed" d="M{x - 5:.1f} {y - 5:.1f}L{x + 5:.1f} {y + 5:.1f}'
                f'M{x - 5:.1f} {y + 5:.1f}L{x + 5:.1f} {y - 5:.1f}"/>')
    if status == REFERENCE:
        return f'<rect class="mark reference" x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9"/>'
    kind = "unverified" if status == UNVERIFIED else "verified"
    return f'<circle class="mark {kind}" cx="{x:.1f}" cy="{y:.1f}" r="5"/>'


def _svg(parts: list[str], title: str, description: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{escape(title)}</title><desc>{escape(description)}</desc>' + "".join(parts) + "</svg>")


def scatter(points: list[Point], y_label: str, title: str) -> str:
    """Latency (x) against `y_label` (y, higher is better) for the points that have a value; the
    front's points are ringed and joined by a step line."""
    drawn = [p for p in points if p.value is not None]
    axes = Axes([p.latency for p in drawn], [p.value for p in drawn])
    parts = axes.frame("p50 latency, ms (lower is better)", f"{y_label} (higher is better)")
    front = sorted((p for p in drawn if p.front), key=lambda p: p.latency)
    if len(front) > 1:
        path = f"M{axes.x(front[0].latency):.1f} {axes.y(front[0].value):.1f}"
        for p in front[1:]:  # a staircase: what is reachable at no more than each latency
            path += f"H{axes.x(p.latency):.1f}V{axes.y(p.value):.1f}"
        parts.append(f'<path class="front" d="{path}"/>')
    for n, p in enumerate(points, 1):
        if p.value is None:
            continue
        x, y = axes.x(p.latency), axes.y(p.value)
        ring = f'<circle class="ring" cx="{x:.1f}" cy="{y:.1f}" r="9"/>' if p.front else ""
        words = (f"{n}. {p.label}: p50 {p.latency:.3g} ms, {y_label} {p.value:.6g}, {p.status}"
                 + (", on the Pareto front" if p.front else ""))
        parts.append(f'<g class="point" tabindex="0" data-key="{escape(p.key)}" data-status="{p.status}" '
                     f'data-front="{str(p.front).lower()}"><title>{escape(words)}</title>{ring}'
                     f'{_mark(p.status, x, y)}<text class="num" x="{x + 7:.1f}" y="{y - 7:.1f}">{n}</text></g>')
    on_front = ", ".join(p.label for p in front) or "none"
    return _svg(parts, title, f"{len(drawn)} timed artifacts; Pareto front of verified ones: {on_front}. "
                              "The table below lists every point.")


def history_chart(series: Series, title: str) -> str:
    """A row's p50 in each report, oldest left, with a whisker over its rounds' spread."""
    pts = series.points
    axes = Axes(range(len(pts)), [v for p in pts for v in (p["low"], p["high"])])
    axes.log, axes.x0, axes.x1 = False, -0.5, len(pts) - 0.5
    parts = axes.frame("report, oldest first", "p50 ms (lower is better)", x_ticks=False)  # numbered below
    line = " ".join(f"{axes.x(i):.1f},{axes.y(p['p50']):.1f}" for i, p in enumerate(pts))
    parts.append(f'<polyline class="trend" points="{line}"/>')
    for i, p in enumerate(pts):
        x = axes.x(i)
        words = f"{p['when']} ({p['source']}): p50 {p['p50']:.3g} ms, spread {p['low']:.3g}..{p['high']:.3g} ms"
        parts.append(f'<g class="point" tabindex="0" data-key="{escape(series.name)}|{i}"><title>{escape(words)}'
                     f'</title><line class="whisker" x1="{x:.1f}" x2="{x:.1f}" y1="{axes.y(p["low"]):.1f}" '
                     f'y2="{axes.y(p["high"]):.1f}"/>{_mark("verified", x, axes.y(p["p50"]))}'
                     f'<text class="tick" x="{x:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{i + 1}</text></g>')
    first, last = pts[0]["p50"], pts[-1]["p50"]
    return _svg(parts, title, f"p50 of {series.name} in {len(pts)} reports, from {first:.3g} ms to {last:.3g} ms.")
