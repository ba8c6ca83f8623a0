"""Line charts drawn as inline SVG, so the report needs no script, font or network.

A chart is a frame with the value range on the left, the time range below,
one polyline per series (a dot for a single point) and a legend. SVG inside
HTML5 needs no namespace declaration, so the markup names no URL at all.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from html import escape
from typing import Final

__all__ = ["PALETTE", "Series", "line_chart"]

#: Colours that stay apart for colour-blind readers (Okabe-Ito).
PALETTE: Final = ("#0072b2", "#d55e00", "#009e73", "#cc79a7")
WIDTH: Final = 460
HEIGHT: Final = 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 12, 26, 34


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    colour: str
    points: tuple[tuple[dt.datetime, float], ...]


def line_chart(chart_id: str, title: str, unit: str, series: list[Series]) -> str:
    """One ``<svg>`` element; a chart without points says so inside its frame."""
    points = [p for s in series for p in s.points if math.isfinite(p[1])]
    parts = [
        f'<svg id="{escape(chart_id)}" class="chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{_LEFT}" y="16" class="title">{escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{WIDTH - _LEFT - _RIGHT}" '
        f'height="{HEIGHT - _TOP - _BOTTOM}" class="frame"/>',
    ]
    if not points:
        parts.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty">no data in this range</text>'
        )
        parts.append("</svg>")
        return "".join(parts)
    t0 = min(t for t, _ in points).timestamp()
    t1 = max(t for t, _ in points).timestamp()
    low = min(0.0, *(v for _, v in points))
    high = max(v for _, v in points)
    if high <= low:
        high = low + 1.0
    span_t = max(t1 - t0, 1.0)

    def x(t: dt.datetime) -> float:
        return _LEFT + (t.timestamp() - t0) / span_t * (WIDTH - _LEFT - _RIGHT)

    def y(v: float) -> float:
        return HEIGHT - _BOTTOM - (v - low) / (high - low) * (HEIGHT - _TOP - _BOTTOM)

    parts += [
        f'<text x="{_LEFT - 4}" y="{_TOP + 10}" class="tick end">{_number(high)}</text>',
        f'<text x="{_LEFT - 4}" y="{HEIGHT - _BOTTOM}" class="tick end">{_number(low)}</text>',
        f'<text x="{_LEFT - 4}" y="{(HEIGHT - _BOTTOM + _TOP) / 2 + 4}" class="tick end">'
        f"{escape(unit)}</text>",
        f'<text x="{_LEFT}" y="{HEIGHT - _BOTTOM + 14}" class="tick">{_time(t0, t1)}</text>',
        f'<text x="{WIDTH - _RIGHT}" y="{HEIGHT - _BOTTOM + 14}" class="tick end">'
        f"{_time(t1, t0)}</text>",
    ]
    legend_x = _LEFT
    for item in series:
        drawn = sorted(p for p in item.points if math.isfinite(p[1]))
        if len(drawn) == 1:
            ((t, v),) = drawn
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{item.colour}"/>')
        elif drawn:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in drawn)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{item.colour}" '
                'stroke-width="2" stroke-linejoin="round"/>'
            )
        parts.append(
            f'<rect x="{legend_x}" y="{HEIGHT - 12}" width="10" height="10" '
            f'fill="{item.colour}"/>'
            f'<text x="{legend_x + 14}" y="{HEIGHT - 3}" class="tick">{escape(item.label)}</text>'
        )
        legend_x += 24 + 7 * len(item.label)
    parts.append("</svg>")
    return "".join(parts)


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _time(seconds: float, other_end: float) -> str:
    """The month and day for spans over a day, the seconds for spans under an hour."""
    span = abs(other_end - seconds)
    form = "%m-%d %H:%M" if span >= 86400 else "%H:%M" if span >= 3600 else "%H:%M:%S"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime(form)
