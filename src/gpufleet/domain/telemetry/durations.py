"""Durations as people type them: `90s`, `30m`, `6h`, `7d`, `2w`, and sums like `1h30m`."""

from __future__ import annotations

import re
from datetime import timedelta

from gpufleet.domain.errors import InvalidInput

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")


def parse_duration(text: str, *, name: str = "duration") -> timedelta:
    """`6h` → 6 hours; a malformed or non-positive duration is an InvalidInput naming it."""
    compact = (text or "").strip().lower()
    if not _WHOLE.match(compact):
        raise InvalidInput(f"{name} '{text}' is not a duration like 90s, 30m, 6h, 7d or 1h30m",
                           code="invalid_duration", details={name: text})
    seconds = sum(float(n) * _UNIT_S[u] for n, u in _PART.findall(compact))
    if seconds <= 0:
        raise InvalidInput(f"{name} '{text}' must be longer than zero",
                           code="invalid_duration", details={name: text})
    return timedelta(seconds=seconds)
