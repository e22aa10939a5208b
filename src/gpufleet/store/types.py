"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import BigInteger, DateTime, Integer, Numeric, String
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


class Money(TypeDecorator):
    """Exact decimal amounts in, `Decimal` out, on both databases (docs/billing.md).

    PostgreSQL stores `numeric(24, 9)`. SQLite's NUMERIC affinity would turn `0.1` into a
    binary float, so there the amount is stored as its decimal text. Amounts with more than
    9 digits after the point, or 15 before it, are refused rather than rounded.
    """

    impl = Numeric(24, 9)
    cache_ok = True
    PLACES = 9
    DIGITS = 24

    def load_dialect_impl(self, dialect):
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(40))
        return dialect.type_descriptor(Numeric(self.DIGITS, self.PLACES, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect) -> Decimal | str | None:
        if value is None:
            return None
        if not isinstance(value, Decimal) or not value.is_finite():
            raise ValueError("the state store takes money as a finite Decimal")
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and -exponent > self.PLACES and \
                value != value.quantize(Decimal(1).scaleb(-self.PLACES)):
            raise ValueError(f"money has more than {self.PLACES} digits after the point")
        return format(value, "f") if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect) -> Decimal | None:
        if value is None:
            return None
        return plain_decimal(Decimal(value) if isinstance(value, str) else value)


def plain_decimal(value: Decimal) -> Decimal:
    """The same amount without trailing zeros or an exponent: `2.500000000` → `2.5`,
    `1E+1` → `10`."""
    return Decimal(format(value.normalize(), "f"))
