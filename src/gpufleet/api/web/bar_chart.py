"""Horizontal bar charts drawn on the server as SVG (docs/dashboard.md, "Charts"): one bar
per item, its label and value as text beside it. Unlike the time-series plots, the SVG
keeps its aspect ratio (it scales, never stretches), so its text stays legible; colours
come from CSS classes, so both themes and the Content-Security-Policy (no inline style)
hold. The figures are also in the table the chart sits beside, for anyone who cannot see
it; the SVG's description says each bar too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

from markupsafe import Markup, escape

WIDTH = 720  # the drawing's own coordinates; CSS sizes it to the section's width
LABEL_W, VALUE_W, ROW_H, BAR_H = 180, 140, 24, 16
_ids = count()


@dataclass(frozen=True)
class Bar:
    label: str
    value: float  # in the chart's unit, ≥ 0
    text: str  # the value as the page writes it (with its unit)


def bar_chart(title: str, unit: str, bars: Sequence[Bar]) -> Markup:
    """Bars scaled to the largest value (which spans the plot's width)."""
    chart_id = f"bars-{next(_ids)}"
    top = max((b.value for b in bars), default=0.0) or 1.0
    plot_w = WIDTH - LABEL_W - VALUE_W
    height = ROW_H * max(len(bars), 1)
    parts = [f'<svg class="bars" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-labelledby="{chart_id}-t {chart_id}-d">',
             f'<title id="{chart_id}-t">{escape(title)} ({escape(unit)})</title>',
             f'<desc id="{chart_id}-d">'
             f'{escape("; ".join(f"{b.label}: {b.text}" for b in bars))}</desc>']
    for index, bar in enumerate(bars):
        y = index * ROW_H
        width = max(plot_w * max(bar.value, 0.0) / top, 1.0)
        mid = y + ROW_H / 2
        parts.append(f'<text class="bar-label" x="{LABEL_W - 8}" y="{mid:.1f}">'
                     f'{escape(bar.label)}</text>'
                     f'<rect class="bar" x="{LABEL_W}" y="{y + (ROW_H - BAR_H) / 2:.1f}" '
                     f'width="{width:.1f}" height="{BAR_H}"><title>{escape(bar.label)}: '
                     f'{escape(bar.text)}</title></rect>'
                     f'<text class="bar-value" x="{LABEL_W + width + 6:.1f}" y="{mid:.1f}">'
                     f'{escape(bar.text)}</text>')
    parts.append("</svg>")
    return Markup(f'<figure class="bar-chart">{"".join(parts)}'
                  f'<figcaption>{escape(title)}</figcaption></figure>')
