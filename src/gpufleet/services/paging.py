"""Keyset pagination: stable pages over large, changing tables.

A cursor is the sort key of the last row served, so the next page starts strictly after it
whatever was inserted meanwhile, and every page is an index range scan (no OFFSET over
100,000 rows). Cursors are opaque to clients: base64 of the JSON of that key.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, tuple_
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from gpufleet.domain.errors import InvalidInput


@dataclass(frozen=True)
class SortSpec:
    """The columns a named sort orders by; the last one must make rows unique."""

    columns: tuple[ColumnElement, ...]
    descending: bool = False


def parse_sort(sort: str, options: dict[str, tuple[ColumnElement, ...]]) -> SortSpec:
    descending = sort.startswith("-")
    name = sort.removeprefix("-")
    if name not in options:
        raise InvalidInput(f"cannot sort by '{name}'; choose one of: {', '.join(options)}",
                           code="invalid_sort", details={"sort": sort, "allowed": list(options)})
    return SortSpec(options[name], descending)


def encode_cursor(values: Sequence[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(values)).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, width: int) -> list[Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInput("the cursor is not one this server issued", code="invalid_cursor",
                           details={"cursor": cursor}) from exc
    if not isinstance(values, list) or len(values) != width:
        raise mismatched_cursor(cursor)
    return values


def mismatched_cursor(cursor: str) -> InvalidInput:
    """The 400 for a cursor this server could have issued, but not for this listing."""
    return InvalidInput("the cursor does not match this listing's sort", code="invalid_cursor",
                        details={"cursor": cursor})


_INT64 = range(-(2**63), 2**63)


def _fits(value: Any, column: ColumnElement) -> bool:
    """Whether a cursor value can be compared with its sort column in SQL.

    A forged cursor must be a 400, not a database type error (PostgreSQL refuses to compare
    bigint with text) or an out-of-range bind.
    """
    expected = column.type.python_type
    if expected is int:
        return type(value) is int and value in _INT64
    return isinstance(value, expected) and not isinstance(value, bool)


def apply_page(query: Select, sort: SortSpec, cursor: str | None, limit: int) -> Select:
    """Order by the sort, start after the cursor, and fetch one row more than the page."""
    columns = sort.columns
    if cursor is not None:
        after = decode_cursor(cursor, len(columns))
        if not all(_fits(value, column) for value, column in zip(after, columns, strict=True)):
            raise mismatched_cursor(cursor)
        key = tuple_(*columns)
        query = query.where(key < tuple_(*after) if sort.descending else key > tuple_(*after))
    order = [c.desc() if sort.descending else c.asc() for c in columns]
    return query.order_by(*order).limit(limit + 1)


def split_page(rows: list, limit: int, key_of) -> tuple[list, str | None]:
    """The page's rows and the cursor for the next page (None on the last page)."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(key_of(rows[-1]))


def keyset_page(session: Session, query: Select, sort: SortSpec, cursor: str | None,
                limit: int) -> tuple[list[tuple], str | None]:
    """One page of `query`'s rows (as tuples) and the cursor for the next page.

    The sort's columns are selected alongside the query's own, so the cursor is read from
    the row itself whatever the query selects, and then dropped from the rows returned.
    """
    width = len(sort.columns)
    paged = apply_page(query.add_columns(*sort.columns), sort, cursor, limit)
    rows, next_cursor = split_page([tuple(row) for row in session.execute(paged)], limit,
                                   lambda row: row[-width:])
    return [row[:-width] for row in rows], next_cursor
