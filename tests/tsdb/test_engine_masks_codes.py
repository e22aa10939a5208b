"""The recorded masks' numbers (tsdb/engine_masks.py): base-3 codes decoded by table as a
digit at a time would, and an export read back into the masks that were recorded, whether
a unit's hours come one line each or several in one line (as the engine exports them)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb.engine_masks import (
    HALF_MARKER_NAME,
    HourMasks,
    decode,
    encode,
    marker_line,
    read_export,
    recorded_lines,
)
from gpufleet.tsdb.protocol import HOUR_MS

HOUR_0 = 1_793_577_600_000 // HOUR_MS * HOUR_MS
T = Thresholds()
U64 = np.uint64


def digit_by_digit(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rest = codes.astype(np.int64)
    known = np.zeros(len(rest), U64)
    hot = np.zeros(len(rest), U64)
    for minute in range(30):
        digit = rest % 3
        rest //= 3
        known |= (digit > 0).astype(U64) << U64(minute)
        hot |= (digit == 2).astype(U64) << U64(minute)
    return known, hot


@given(st.lists(st.integers(0, 3**30 - 1), max_size=50))
def test_decode_gives_each_minute_of_the_code(codes):
    got = decode(np.array(codes, np.float64))
    want = digit_by_digit(np.array(codes, np.int64))
    assert [a.tolist() for a in got] == [w.tolist() for w in want]


def test_decode_undoes_encode():
    rng = np.random.default_rng(7)
    known = rng.integers(0, 1 << 30, 500, dtype=U64)
    hot = known & rng.integers(0, 1 << 30, 500, dtype=U64)
    got_known, got_hot = decode(encode(known, hot).astype(np.float64))
    assert (got_known == known).all() and (got_hot == hot).all()


def random_hour(rng: np.random.Generator, units: int) -> HourMasks:
    hour = HourMasks(units)
    hour.act_known = rng.integers(0, 1 << 60, units, dtype=U64)
    hour.act_hot = hour.act_known & rng.integers(0, 1 << 60, units, dtype=U64)
    hour.sm_known = rng.integers(0, 1 << 60, units, dtype=U64)
    hour.sm_hot = hour.sm_known & rng.integers(0, 1 << 60, units, dtype=U64)
    hour.sm_sum = rng.integers(0, 6000, units) / 4
    return hour


def merged(lines: list[bytes]) -> list[bytes]:
    """The recorded lines of each series merged into one, as `/api/v1/export` gives them."""
    by_series: dict[bytes, dict] = {}
    for line in filter(None, lines):
        found = orjson.loads(line)
        key = orjson.dumps(found["metric"], option=orjson.OPT_SORT_KEYS)
        held = by_series.setdefault(key, {"metric": found["metric"], "values": [],
                                          "timestamps": []})
        held["values"] += found["values"]
        held["timestamps"] += found["timestamps"]
    return [orjson.dumps(s) for s in by_series.values()]


@pytest.mark.parametrize("as_exported", [False, True])
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), units=st.integers(1, 12))
def test_an_export_reads_back_the_recorded_hours(as_exported, seed, units):
    rng = np.random.default_rng(seed)
    labels = [{"gpu_uuid": f"GPU-{u}", "node": "n"} for u in range(units)]
    recorded, lines = {}, []
    for h in range(3):
        hour = random_hour(rng, units)
        hour.act_known[rng.random(units) < 0.3] = 0  # some units not in every hour
        hour.sm_known[hour.act_known == 0] = 0
        hour.act_hot &= hour.act_known
        hour.sm_hot &= hour.sm_known
        hour.sm_sum[hour.sm_known == 0] = 0
        body, count = recorded_lines(HOUR_0 + h * HOUR_MS, hour, labels, T)
        lines += body.splitlines()
        lines.append(marker_line(HOUR_0 + h * HOUR_MS, count, T))
        recorded[HOUR_0 + h * HOUR_MS] = hour
    got = read_export(merged(lines) if as_exported else lines,
                      lambda found, at: int(found["gpu_uuid"][4:]), lambda: units)
    assert set(got) == set(recorded)
    for hour_ms, hour in recorded.items():
        for name in set(HourMasks.__slots__) - {"sm_sum_lo"}:
            assert getattr(got[hour_ms], name).tolist() == getattr(hour, name).tolist(), name
        # An hour read back holds the hour's sum only: its first half's is not known.
        assert np.isnan(got[hour_ms].sm_sum_lo[hour.units()]).all()


@pytest.mark.parametrize("as_exported", [False, True])
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), units=st.integers(1, 12))
def test_an_export_reads_back_the_recorded_first_halves(as_exported, seed, units):
    """A first half recorded (`half=True`) reads back as the hour's minutes 0–29 and
    their sm_active sum; the minutes 30–59 the hour held are not recorded."""
    rng = np.random.default_rng(seed)
    labels = [{"gpu_uuid": f"GPU-{u}", "node": "n"} for u in range(units)]
    recorded, lines = {}, []
    for h in range(2):
        hour = random_hour(rng, units)
        hour.act_known[rng.random(units) < 0.3] &= U64(~((1 << 30) - 1) & ((1 << 64) - 1))
        hour.sm_known &= hour.act_known
        hour.act_hot &= hour.act_known
        hour.sm_hot &= hour.sm_known
        hour.sm_sum_lo = rng.integers(0, 3000, units) / 4
        body, count = recorded_lines(HOUR_0 + h * HOUR_MS, hour, labels, T, half=True)
        assert count == len(hour.half_units())
        lines += body.splitlines()
        lines.append(marker_line(HOUR_0 + h * HOUR_MS, count, T, HALF_MARKER_NAME))
        recorded[HOUR_0 + h * HOUR_MS] = hour
    got = read_export(merged(lines) if as_exported else lines,
                      lambda found, at: int(found["gpu_uuid"][4:]), lambda: units, half=True)
    assert set(got) == set(recorded)
    # The hours' recording is not taken for halves, nor the halves' for hours.
    assert read_export(lines, lambda found, at: int(found["gpu_uuid"][4:]),
                       lambda: units) == {}
    low = U64((1 << 30) - 1)
    for hour_ms, hour in recorded.items():
        read_back, uids = got[hour_ms], hour.half_units()
        for name in ("act_known", "act_hot", "sm_known", "sm_hot"):
            assert (getattr(read_back, name) == (getattr(hour, name) & low)).all(), name
        assert read_back.sm_sum[uids].tolist() == hour.sm_sum_lo[uids].tolist()
        assert read_back.sm_sum_lo[uids].tolist() == hour.sm_sum_lo[uids].tolist()


def test_a_first_half_whose_sum_is_not_known_is_not_recorded():
    hour = HourMasks(1)
    hour.set_codes(np.array([0]), [np.array([1.0])] + [np.array([0.0])] * 4)
    with pytest.raises(ValueError):
        recorded_lines(HOUR_0, hour, [{"gpu_uuid": "GPU-0"}], T, half=True)


def test_an_export_whose_line_has_more_values_than_times_is_refused():
    hour = HourMasks(1)
    hour.set_codes(np.array([0]), [np.array([1.0])] + [np.array([0.0])] * 4)
    body, _ = recorded_lines(HOUR_0, hour, [{"gpu_uuid": "GPU-0"}], T)
    broken = body.strip().replace(b'"values":[', b'"values":[1.0,')
    with pytest.raises(ValueError):
        read_export([broken, marker_line(HOUR_0, 1, T)], lambda found, at: 0, lambda: 1)
