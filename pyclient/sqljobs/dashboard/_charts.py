"""Charts as inline SVG drawn on the server: no JavaScript library in the page.

`bars` draws one bar per time bucket, the series stacked, with a time axis (UTC) below,
the count per bucket on the left axis and the same scale as a rate (per second, minute
or hour) on the right one, so a chart reads both as counts and as rates. Every bar's
title gives its numbers (a browser shows it on hover).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from sqljobs.dashboard._present import per_unit, rate

WIDTH, HEIGHT = 720, 190
LEFT, RIGHT, TOP, BOTTOM = 46, 58, 24, 28  # room for the axes' labels
# minutes between two time labels: the first that leaves at most 6 labels
_TICK_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 180, 240, 360, 720)


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    values: Sequence[int]


def nice_top(peak: int) -> tuple[int, int]:
    """The axis' top and step: 1, 2 or 5 times a power of ten, at most 4 steps."""
    if peak <= 0:
        return 1, 1
    step = 1
    while True:
        for factor in (1, 2, 5):
            size = step * factor
            if math.ceil(peak / size) <= 4:
                return math.ceil(peak / size) * size, size
        step *= 10


def time_ticks(start: datetime, bucket: timedelta, buckets: int) -> list[tuple[int, datetime]]:
    """(bucket index, time) of the labelled boundaries: round times, at most 6."""
    span_min = bucket.total_seconds() * buckets / 60
    every = next((m for m in _TICK_MINUTES if span_min / m <= 6), _TICK_MINUTES[-1])
    ticks = []
    for i in range(buckets + 1):
        at = start + bucket * i
        minute = at.hour * 60 + at.minute
        if at.second == 0 and minute % every == 0:
            ticks.append((i, at))
    return ticks


def bars(start: datetime, bucket: timedelta, series: Sequence[Series], caption: str,
         *, height: int = HEIGHT, chart_id: str | None = None) -> Markup:
    """Stacked bars per bucket of `bucket` from `start`, with both axes and a caption."""
    buckets = max((len(s.values) for s in series), default=0)
    totals = [sum(s.values[i] for s in series if i < len(s.values)) for i in range(buckets)]
    top, step = nice_top(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - TOP - BOTTOM
    slot = plot_w / max(buckets, 1)
    bucket_s = bucket.total_seconds()
    unit = per_unit(top / bucket_s)
    out: list[str] = []
    # the count axis (left), its rate twin (right), and a grid line per step
    for value in range(0, top + 1, step):
        y = TOP + plot_h - plot_h * value / top
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" '
                   f'class="grid"/>')
        out.append(f'<text x="{LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">{value}</text>')
        out.append(f'<text x="{LEFT + plot_w + 5}" y="{y + 4:.1f}">'
                   f'{escape(rate(value / bucket_s, unit, suffix=False))}</text>')
    bucket_label = _bucket_words(bucket)
    out.append(f'<text x="4" y="{TOP - 10}" class="axis-title">per {bucket_label}</text>')
    out.append(f'<text x="{WIDTH - 4}" y="{TOP - 10}" text-anchor="end" '
               f'class="axis-title">{escape(unit)}</text>')
    # the time axis
    base = TOP + plot_h
    out.append(f'<line x1="{LEFT}" y1="{base}" x2="{LEFT + plot_w}" y2="{base}" class="axis"/>')
    for i, at in time_ticks(start, bucket, buckets):
        x = LEFT + i * slot
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" class="axis"/>')
        out.append(f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">'
                   f'{at:%H:%M}</text>')
    out.append(f'<text x="{LEFT + plot_w}" y="{height - 1}" text-anchor="end" '
               f'class="axis-title">UTC</text>')
    # the bars, stacked in the order given
    for i in range(buckets):
        at = start + bucket * i
        below = 0
        parts = []
        for s in series:
            value = s.values[i] if i < len(s.values) else 0
            parts.append(f"{value} {s.label}")
            if value:
                h = plot_h * value / top
                y = base - plot_h * (below + value) / top
                out.append(f'<rect x="{LEFT + i * slot + 0.5:.1f}" y="{y:.1f}" '
                           f'width="{max(slot - 1, 1):.1f}" height="{h:.1f}" '
                           f'fill="{s.colour}"/>')
            below += value
        title = (f"{at:%H:%M}–{at + bucket:%H:%M} UTC: " + ", ".join(parts)
                 + f" ({rate(totals[i] / bucket_s)})")
        # a transparent column per bucket carries the numbers (hover anywhere on it)
        out.append(f'<rect x="{LEFT + i * slot:.1f}" y="{TOP}" width="{slot:.1f}" '
                   f'height="{plot_h}" fill="transparent"><title>{escape(title)}</title></rect>')
    legend = " ".join(f'<tspan fill="{s.colour}">■</tspan> {escape(s.label)}' for s in series)
    ident = f' id="{escape(chart_id)}"' if chart_id else ""
    return Markup(
        f'<figure class="chart"{ident}><figcaption>{escape(caption)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(caption)}">'
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{TOP - 10}" text-anchor="middle">{legend}</text>'
        + "".join(out) + "</svg></figure>")


def _bucket_words(bucket: timedelta) -> str:
    minutes = int(bucket.total_seconds() // 60)
    if minutes == 1:
        return "minute"
    if minutes % 60 == 0:
        return f"{minutes // 60} h"
    return f"{minutes} min"
