"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, DateTime, Integer
from sqlalchemy.types import TypeDecorator

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
Id = BigInteger().with_variant(Integer(), "sqlite")


class UtcDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes in, timezone-aware UTC datetimes out, on both databases.

    SQLite has no timezone type, so values are stored as naive UTC there and re-tagged on
    the way out; PostgreSQL stores `timestamptz`.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the state store; pass an aware UTC time")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
