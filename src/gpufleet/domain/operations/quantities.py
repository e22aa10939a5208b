"""Values as an operator reads them: a rule's value shown in its unit (80 GiB, 97.3 %,
91 °C, 16 min, 0xe8), never as raw bytes in scientific notation (8.59e+10).

A value's unit is the metric catalogue's unit column (authoritative: docs/design.md,
"Telemetry model"), or for the values a rule computes itself — a percentage of another
metric, a count of units, how long something has been silent or pending — the unit of that
computation (`Rule.value_unit`). Pure: no I/O.
"""

from __future__ import annotations

import math

from gpufleet.domain.telemetry.vocabulary import Unit

# Units of values rules compute that no catalogue metric has.
SECONDS = "seconds"
HOURS = "hours"

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL = ("", "k", "M", "G", "T")


def show(value: float, unit: str | None) -> str:
    """`value` in `unit` as a person reads it; a unit not known here: the bare number."""
    if not math.isfinite(value):
        return f"{value:g}"
    if unit == Unit.BYTES:
        return _scaled(value, 1024, _BINARY)
    if unit == Unit.BYTES_PER_SECOND:
        return _scaled(value, 1024, _BINARY) + "/s"
    if unit == Unit.PERCENT:
        return f"{significant(value)} %"
    if unit == Unit.CELSIUS:
        return f"{significant(value)} °C"
    if unit == Unit.WATTS:
        return _scaled(value, 1000, _DECIMAL) + "W"
    if unit == Unit.JOULES:
        return _scaled(value, 1000, _DECIMAL) + "J"
    if unit == Unit.MHZ:
        return f"{value:.0f} MHz"
    if unit == Unit.FLAGS:
        return f"{int(value):#x}"
    if unit in (Unit.BOOLEAN, Unit.CODE):
        return f"{int(value)}"
    if unit == SECONDS:
        return duration(value)
    if unit == HOURS:
        return duration(value * 3600)
    return f"{value:.0f}" if value == int(value) else significant(value)


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, never in exponent notation, without
    trailing zeros: 80, 13.7, 0.271, 1234567."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def duration(seconds: float) -> str:
    """A span the way people say it: 45 s, 12 min, 3.5 h, 2.1 d."""
    if abs(seconds) < 90:
        return f"{seconds:.0f} s"
    if abs(seconds) < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if abs(seconds) < 48 * 3600:
        return f"{significant(seconds / 3600, 2)} h"
    return f"{significant(seconds / 86400, 2)} d"


def _scaled(value: float, base: int, prefixes: tuple[str, ...]) -> str:
    step = 0
    while abs(value) >= base and step < len(prefixes) - 1:
        value /= base
        step += 1
    return f"{significant(value)} {prefixes[step]}"


class Quantity(float):
    """A value that knows its unit, for summary templates: `{value}` renders it in its unit
    (`show`), a format spec (`{value:.0f}`) the bare number, as before."""

    unit: str | None

    def __new__(cls, value: float, unit: str | None) -> Quantity:
        made = super().__new__(cls, value)
        made.unit = unit
        return made

    def __format__(self, spec: str) -> str:
        return show(float(self), self.unit) if not spec else format(float(self), spec)

    def __str__(self) -> str:
        return show(float(self), self.unit)
