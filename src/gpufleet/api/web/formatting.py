"""Numbers with units for the templates: one place, so every page says them alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def gpu_hours(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f} GPU-h"


def gpus(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f} GPUs"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} %"


def gib(value_bytes: float | None) -> str:
    """Memory in GiB (the unit nvidia-smi and the CLI use)."""
    return "—" if value_bytes is None else f"{value_bytes / 1024**3:,.1f} GiB"


def quantity(value: float | None, unit: str) -> str:
    """A chart's reading in its unit (`%`, `GiB`, `W`, `°C`, `MHz`, `errors`)."""
    if value is None:
        return "—"
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:,.3g} {unit}"


def utc_text(value: datetime) -> str:
    """What a `<time>` element shows before (or without) the local-time script."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def hours(value: float | None) -> str:
    """A length of time in hours; under an hour in minutes (`0.0 h` would hide it)."""
    if value is None:
        return "—"
    return f"{value:,.1f} h" if value >= 1 else f"{value * 60:.1f} min"


def units(value: float | None) -> str:
    """A count of units (GPUs, MIG instances; shared flavours in GPUs' worth)."""
    if value is None:
        return "—"
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{text} unit" if value == 1 else f"{text} units"


def duration(value: timedelta | None) -> str:
    """How long, to the minute: `3 d 4 h`, `5 h 20 min`, `12 min`."""
    if value is None:
        return "—"
    minutes = max(int(value.total_seconds() // 60), 0)
    days, rest = divmod(minutes, 24 * 60)
    h, m = divmod(rest, 60)
    if days:
        return f"{days} d {h} h"
    return f"{h} h {m} min" if h else f"{m} min"


def asked_for(request) -> str:
    """What a request (or its preview) asks for, as a person would say it."""
    models = " or ".join(request.models) if request.models else "any model"
    if request.kind == "mig":
        return f"{request.count} × MIG {request.mig_profile} ({models})"
    if request.kind == "shared":
        return f"{request.count} × {request.milli / 1000:g} of a shared GPU ({models})"
    return f"{request.count} × whole GPU ({models})"


def utc_seconds(value: datetime) -> str:
    """`utc_text` to the second, for events that follow each other within a minute."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def install(env) -> None:
    env.filters.update(gpu_hours=gpu_hours, gpus=gpus, percent=percent, utc_text=utc_text,
                       gib=gib, utc_seconds=utc_seconds, hours=hours, duration=duration,
                       units=units, asked_for=asked_for, quantity=quantity)
