"""Time-series charts drawn on the server as SVG: no chart library, no script, nothing
fetched — the page is complete on first render and works air-gapped (docs/dashboard.md,
"Charts").

A chart is a few series over one window, in one unit. Missing samples (None) break the
line rather than being drawn as zero: "not known" is never 0 (docs/design.md, "Funnel and
activity"). Colours come from CSS classes (`series-0` …), so light and dark themes and the
page's Content-Security-Policy (no inline styles) both hold."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import count

from markupsafe import Markup, escape

from gpufleet.api.web.formatting import utc_text

WIDTH, HEIGHT = 720, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 8, 22  # room for the axes' labels
SERIES_CLASSES = 6
_ids = count()


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[datetime, float | None]]


def nice_ceiling(value: float) -> float:
    """The y axis' top: 1, 2, 2.5 or 5 times a power of ten, at or above the largest
    value, so its ticks read as round numbers."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def _runs(points, x, y) -> list[str]:
    """Polyline point lists, one per run of known values."""
    runs, current = [], []
    for when, value in points:
        if value is None or not math.isfinite(value):
            if current:
                runs.append(current)
            current = []
            continue
        current.append(f"{x(when):.1f},{y(value):.1f}")
    if current:
        runs.append(current)
    return [" ".join(run) for run in runs]


def line_chart(title: str, unit: str, start: datetime, end: datetime,
               series: Sequence[Series], y_max: float | None = None) -> Markup:
    """An SVG line chart of `series` over [start, end], the y axis from 0 in `unit`
    (`y_max` fixes its top, e.g. 100 for a percentage)."""
    chart_id = f"chart-{next(_ids)}"
    values = [v for s in series for _, v in s.points if v is not None and math.isfinite(v)]
    top = y_max if y_max is not None else nice_ceiling(max(values, default=0.0))
    span_s = max((end - start).total_seconds(), 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(when: datetime) -> float:
        return LEFT + plot_w * min(max((when - start).total_seconds() / span_s, 0.0), 1.0)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - min(max(value / top, 0.0), 1.0))

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-labelledby="{chart_id}-t {chart_id}-d" preserveAspectRatio="none">',
             f'<title id="{chart_id}-t">{escape(title)} ({escape(unit)})</title>',
             f'<desc id="{chart_id}-d">{escape(_summary(series, unit))}</desc>']
    for fraction in (0.0, 0.5, 1.0):
        ty = y(top * fraction)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" '
                     f'y2="{ty:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 4}" y="{ty + 4:.1f}" '
                     f'text-anchor="end">{escape(_number(top * fraction))}</text>')
    for fraction, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        when = start + (end - start) * fraction
        parts.append(f'<text class="axis" x="{x(when):.1f}" y="{HEIGHT - 6}" '
                     f'text-anchor="{anchor}" data-datetime="{when.isoformat()}">'
                     f'{escape(utc_text(when))}</text>')
    for index, one in enumerate(series):
        css = f"series series-{index % SERIES_CLASSES}"
        for run in _runs(one.points, x, y):
            parts.append(f'<polyline class="{css}" points="{run}">'
                         f'<title>{escape(one.label)}</title></polyline>')
    parts.append("</svg>")
    legend = "".join(f'<li><span class="swatch series-{i % SERIES_CLASSES}"></span>'
                     f'{escape(s.label)}</li>' for i, s in enumerate(series))
    body = "".join(parts)
    if not values:
        body += '<p class="empty">No samples in this window.</p>'
    return Markup(f'<figure class="chart">{body}'
                  f'<figcaption>{escape(title)} ({escape(unit)})'
                  f'<ul class="legend">{legend}</ul></figcaption></figure>')


def _summary(series: Sequence[Series], unit: str) -> str:
    """What a screen reader hears: each series' last, lowest and highest value."""
    said = []
    for one in series:
        known = [v for _, v in one.points if v is not None and math.isfinite(v)]
        if not known:
            said.append(f"{one.label}: no samples")
            continue
        said.append(f"{one.label}: last {_number(known[-1])} {unit}, "
                    f"min {_number(min(known))}, max {_number(max(known))}")
    return "; ".join(said) or "no series"


def install(env) -> None:
    env.globals.update(line_chart=line_chart, ChartSeries=Series)
