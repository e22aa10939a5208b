"""Time-series charts drawn on the server as SVG: no chart library, no script, nothing
fetched — the page is complete on first render and works air-gapped (docs/dashboard.md,
"Charts").

A chart is a few series over one window, in one unit. Missing samples (None) break the
line rather than being drawn as zero: "not known" is never 0 (docs/design.md, "Funnel and
activity"). Colours and dashes come from CSS classes (`series-0` …), so light and dark
themes and the page's Content-Security-Policy (no inline styles) both hold.

The plot stretches to its box (`preserveAspectRatio="none"`), so no text is drawn inside
it: stretched, it would read as a wide, blurred face. The axes' labels are HTML beside the
plot, in the page's font, placed by CSS classes (`tick-0`, `tick-50`, `tick-100`); the
times are `<time>` elements, which local-time.js shows in the viewer's zone. A chart with no
sample at all is a line of text, not an empty frame."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import count

from markupsafe import Markup, escape

from gpufleet.api.web.formatting import utc_text

WIDTH, HEIGHT = 720, 180  # the plot's own coordinates; CSS sizes it on the page
TICKS = (0.0, 0.5, 1.0)  # fractions of the axis labelled (the CSS classes tick-0 … tick-100)
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
    caption = f"{escape(title)} ({escape(unit)})"
    values = [v for s in series for _, v in s.points if v is not None and math.isfinite(v)]
    if not values:
        return Markup(f'<figure class="chart chart-empty"><figcaption>{caption}: '
                      f'<span class="empty">no samples in this window.</span>'
                      f'</figcaption></figure>')
    top = y_max if y_max is not None else nice_ceiling(max(values))
    span_s = max((end - start).total_seconds(), 1.0)

    def x(when: datetime) -> float:
        return WIDTH * min(max((when - start).total_seconds() / span_s, 0.0), 1.0)

    def y(value: float) -> float:
        return HEIGHT * (1 - min(max(value / top, 0.0), 1.0))

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-labelledby="{chart_id}-t {chart_id}-d" preserveAspectRatio="none">',
             f'<title id="{chart_id}-t">{caption}</title>',
             f'<desc id="{chart_id}-d">{escape(_summary(series, unit))}</desc>']
    for fraction in TICKS:
        ty = y(top * fraction)
        parts.append(f'<line class="grid" x1="0" x2="{WIDTH}" y1="{ty:.1f}" y2="{ty:.1f}"/>')
    for index, one in enumerate(series):
        css = f"series series-{index % SERIES_CLASSES}"
        for run in _runs(one.points, x, y):
            parts.append(f'<polyline class="{css}" points="{run}">'
                         f'<title>{escape(one.label)}</title></polyline>')
    parts.append("</svg>")
    y_labels = "".join(f'<span class="tick-{round(f * 100)}">{escape(_number(top * f))}</span>'
                       for f in TICKS)
    x_labels = "".join(_time_tick(f, start + (end - start) * f) for f in TICKS)
    legend = "".join(f'<li>{_swatch(i)}{escape(s.label)}</li>' for i, s in enumerate(series))
    return Markup(f'<figure class="chart"><div class="plot">'
                  f'<div class="y-axis" aria-hidden="true">{y_labels}</div>{"".join(parts)}'
                  f'<div class="x-axis" aria-hidden="true">{x_labels}</div></div>'
                  f'<figcaption>{caption}<ul class="legend">{legend}</ul></figcaption></figure>')


def _time_tick(fraction: float, when: datetime) -> str:
    return (f'<time class="tick-{round(fraction * 100)}" datetime="{when.isoformat()}">'
            f'{escape(utc_text(when))}</time>')


def _swatch(index: int) -> str:
    """A legend's sample of a series' line: the same classes, so the same colour and dash."""
    return (f'<svg class="swatch" viewBox="0 0 20 6" aria-hidden="true">'
            f'<line class="series series-{index % SERIES_CLASSES}" x1="0" y1="3" x2="20" y2="3"/>'
            f'</svg>')


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
