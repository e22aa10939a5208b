"""Reading recorded hours back (tsdb/engine_masks.py `read_export`): an hour is taken only
when its marker vouches for exactly the units found, and markers of one hour that disagree
(two leaders' writes the engine has not deduplicated yet) vouch for nothing."""

from __future__ import annotations

import numpy as np

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb.engine_masks import HourMasks, marker_line, read_export, recorded_lines
from gpufleet.tsdb.protocol import HOUR_MS

HOUR_MS_0 = 1_793_577_600_000 // HOUR_MS * HOUR_MS
T = Thresholds()
LABELS = [{"gpu_uuid": "GPU-1", "node": "n"}]


def one_recorded_hour() -> list[bytes]:
    hour = HourMasks(1)  # minute 0 known (base-3 digit 1: below the threshold), no more
    hour.set_codes(np.array([0]), [np.array([1.0])] + [np.array([0.0])] * 4)
    body, units = recorded_lines(HOUR_MS_0, hour, LABELS, T)
    assert units == 1
    return body.splitlines()


def read(lines: list[bytes]) -> set[int]:
    return set(read_export(lines, lambda labels, at: 0, lambda: 1))


def test_an_hour_whose_marker_matches_is_taken():
    assert read([*one_recorded_hour(), marker_line(HOUR_MS_0, 1, T)]) == {HOUR_MS_0}


def test_an_hour_without_a_marker_or_with_another_count_is_not():
    assert read(one_recorded_hour()) == set()
    assert read([*one_recorded_hour(), marker_line(HOUR_MS_0, 2, T)]) == set()


def test_markers_that_disagree_vouch_for_nothing():
    both = b'{"metric":{"__name__":"gpufleet_masks_recorded"},"values":[2,1],' \
           b'"timestamps":[%d,%d]}' % (HOUR_MS_0, HOUR_MS_0)
    assert read([*one_recorded_hour(), both]) == set()
    same = both.replace(b"[2,1]", b"[1,1]")
    assert read([*one_recorded_hour(), same]) == {HOUR_MS_0}
