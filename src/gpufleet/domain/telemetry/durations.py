"""Durations as people type them: `90s`, `30m`, `6h`, `7d`, `2w`, and sums like `1h30m` —
and the bounds every duration and time a caller gives must stay within.

Why bounds: Python's `timedelta` and `datetime` overflow (an `OverflowError`, not a
`ValueError`) far inside what a query string can spell (`99999999999999999999d`, or a window
reaching back before year 1 from `end=0001-01-01T00:30Z`). Every duration is at most
`MAX_DURATION` and every time lies in [`EARLIEST_TIME`, `LATEST_TIME`), so any time plus or
minus any duration is still a datetime; input outside is a 400 naming it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from gpufleet.domain.errors import InvalidInput
from gpufleet.text_limits import MAX_DURATION_DAYS

MAX_DURATION = timedelta(days=MAX_DURATION_DAYS)  # longer than any window, request or TTL
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)  # nothing gpufleet records is older
LATEST_TIME = datetime(3000, 1, 1, tzinfo=UTC)

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")


def parse_duration(text: str, *, name: str = "duration") -> timedelta:
    """`6h` → 6 hours; a malformed, non-positive or over-long (> 100 years) duration is an
    InvalidInput naming it."""
    compact = (text or "").strip().lower()
    if not _WHOLE.match(compact):
        raise InvalidInput(f"{name} '{text}' is not a duration like 90s, 30m, 6h, 7d or 1h30m",
                           code="invalid_duration", details={name: text})
    seconds = sum(float(n) * _UNIT_S[u] for n, u in _PART.findall(compact))
    if seconds <= 0:
        raise InvalidInput(f"{name} '{text}' must be longer than zero",
                           code="invalid_duration", details={name: text})
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidInput(f"{name} '{text}' is longer than {MAX_DURATION.days} days",
                           code="invalid_duration",
                           details={name: text, "max_days": MAX_DURATION.days})
    return timedelta(seconds=seconds)


def check_time(at: datetime, *, name: str) -> datetime:
    """`at` itself when it has a time zone and lies in [1970, 3000); else an InvalidInput
    naming it (`naive_time`, `time_out_of_range`)."""
    if at.tzinfo is None:
        raise InvalidInput(f"{name} needs a time zone (e.g. 2026-11-02T09:00Z)",
                           code="naive_time", details={name: at.isoformat()})
    if not EARLIEST_TIME <= at < LATEST_TIME:
        raise InvalidInput(f"{name} {at.isoformat()} is outside the times gpufleet accepts "
                           f"({EARLIEST_TIME.year} to {LATEST_TIME.year - 1})",
                           code="time_out_of_range", details={name: at.isoformat()})
    return at
