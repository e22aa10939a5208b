"""Shared pieces of every wire schema."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, StringConstraints

from gpufleet.domain.telemetry.durations import EARLIEST_TIME, LATEST_TIME, MAX_DURATION

T = TypeVar("T")


class BodyTooLarge(ValueError):
    """A body that is, or would inflate to, more than the limit it is decoded under."""


class StrictModel(BaseModel):
    """Request bodies: an unknown field is an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class View(BaseModel):
    """Response bodies: clients must ignore fields they do not know."""

    model_config = ConfigDict(from_attributes=True)


class Page(View, Generic[T]):
    """One page of a listing; pass `next_cursor` back as `cursor` for the next one."""

    items: list[T]
    next_cursor: str | None = None


Name = Annotated[str, StringConstraints(min_length=1, max_length=63,
                                        pattern=r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=63,
                                            pattern=r"^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$")]
LabelValue = Annotated[str, StringConstraints(max_length=255)]
Text = Annotated[str, StringConstraints(max_length=2000)]


def _accepted_time(at: datetime) -> datetime:
    if not EARLIEST_TIME <= at < LATEST_TIME:
        raise ValueError(f"must lie between {EARLIEST_TIME.year} and {LATEST_TIME.year - 1}")
    return at


# A time a client gives: with a zone, within the years any duration can be added to
# without overflowing (domain/telemetry/durations.py).
Time = Annotated[AwareDatetime, AfterValidator(_accepted_time)]
MAX_HOURS = MAX_DURATION.total_seconds() / 3600
