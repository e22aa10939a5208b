"""Numbers with units for the templates: one place, so every page says them alike."""

from __future__ import annotations

from datetime import UTC, datetime


def gpu_hours(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f} GPU-h"


def gpus(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f} GPUs"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} %"


def gib(value: float | None) -> str:
    """Bytes as GiB, the unit the dashboard says memory in."""
    return "—" if value is None else f"{value / 1024**3:,.1f} GiB"


def quantity(value: float | None, unit: str) -> str:
    """A chart's reading in its unit (`%`, `GiB`, `W`, `°C`, `MHz`, `errors`)."""
    if value is None:
        return "—"
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:,.3g} {unit}"


def utc_text(value: datetime) -> str:
    """What a `<time>` element shows before (or without) the local-time script."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def install(env) -> None:
    env.filters.update(gpu_hours=gpu_hours, gpus=gpus, percent=percent, utc_text=utc_text)
    env.filters.update(gib=gib, quantity=quantity)
