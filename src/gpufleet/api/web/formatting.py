"""Numbers with units for the templates: one place, so every page says them alike."""

from __future__ import annotations

from datetime import UTC, datetime


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


def units(value: float | None) -> str:
    """A count of units (GPUs, MIG instances; shared flavours in GPUs' worth)."""
    if value is None:
        return "—"
    return f"{value:,.0f} units" if float(value).is_integer() else f"{value:,.2f} units"


def hours(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 3600:,.1f} h"


def asked_for(request) -> str:
    """What a request (or its preview) asks for, as a person would say it."""
    models = " or ".join(request.models) if request.models else "any model"
    if request.kind == "mig":
        return f"{request.count} × MIG {request.mig_profile} ({models})"
    if request.kind == "shared":
        return f"{request.count} × {request.milli / 1000:g} of a shared GPU ({models})"
    return f"{request.count} × whole GPU ({models})"


def install(env) -> None:
    env.filters.update(gpu_hours=gpu_hours, gpus=gpus, percent=percent, utc_text=utc_text,
                       gib=gib)
    env.filters.update(units=units, hours=hours, asked_for=asked_for,
                       quantity=quantity)
