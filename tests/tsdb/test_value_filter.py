"""The value filter a query hands the store (tsdb/protocol.py, `ValueFilter`)."""

from __future__ import annotations

import math

import duckdb
import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.vocabulary import Comparison
from gpufleet.tsdb import ValueFilter


@pytest.mark.parametrize("limit", [math.nan, math.inf, -math.inf])
def test_a_limit_must_be_a_finite_number(limit):
    with pytest.raises(InvalidInput, match="finite"):
        ValueFilter(Comparison.GT, limit)


@pytest.mark.parametrize("mask", [0.0, 2.5, -4.0, 2.0**64])
def test_a_bit_mask_must_be_a_positive_integer(mask):
    with pytest.raises(InvalidInput, match="has_any_bits"):
        ValueFilter(Comparison.HAS_ANY_BITS, mask)


@pytest.mark.parametrize(("op", "value", "passes"), [
    (Comparison.GT, 85.0, False), (Comparison.GE, 85.0, True), (Comparison.LT, 85.0, False),
    (Comparison.LE, 85.0, True), (Comparison.EQ, 85.0, True), (Comparison.NE, 85.0, False),
    (Comparison.HAS_ANY_BITS, 64.0 + 4.0, True), (Comparison.HAS_ANY_BITS, 2.0, False),
])
def test_the_comparison_in_python_and_in_sql_agree(op, value, passes):
    where = ValueFilter(op, value)
    sample = 85.0  # 0b1010101 as a bit mask
    assert where.holds(sample) is passes
    with duckdb.connect() as con:
        assert con.execute(f"SELECT {where.sql('v')} FROM (SELECT {sample}::DOUBLE AS v)"
                           ).fetchone()[0] is passes
