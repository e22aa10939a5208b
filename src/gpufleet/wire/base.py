"""Shared pieces of every wire schema."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints

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
