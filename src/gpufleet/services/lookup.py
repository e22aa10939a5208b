"""Finding one named thing, and the one answer when it is not there."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from gpufleet.domain.errors import NotFound

Row = TypeVar("Row")


def not_found(kind: str, key: Any, *, label: str | None = None) -> NotFound:
    """`<kind> '<key>' does not exist`, code `<kind>_not_found`, details `{kind: key}` —
    the same for every kind, and for things that exist but the caller may not see."""
    shown = f"'{key}'" if isinstance(key, str) else str(key)
    return NotFound(f"{label or kind} {shown} does not exist", code=f"{kind}_not_found",
                    details={kind: key})


def one_where(session: Session, table: type[Row], condition: ColumnElement[bool], kind: str,
              key: Any, *, label: str | None = None) -> Row:
    """The row of `table` matching `condition`, or `not_found(kind, key)`."""
    row = session.scalar(select(table).where(condition))
    if row is None:
        raise not_found(kind, key, label=label)
    return row
