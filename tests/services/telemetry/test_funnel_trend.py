"""The funnel's trend (`step`): each step counted as the funnel counts the window, the steps
adding up to the window's figures, and the allocations' usage (docs/dashboard.md, "Usage
duration"); the API's role model and its 400s as for the funnel itself."""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise

import pytest

from tests.services.telemetry.test_queries import HOURS, fleet, get  # noqa: F401 (a fixture)

KEYS = ("allocated_gpu_hours", "active_gpu_hours", "effective_gpu_hours")


def test_each_step_counts_its_own_hours_and_they_add_up(api, fleet):  # noqa: F811
    view = get(api, "funnel", window=f"{HOURS}h", step="1h")
    assert view["step_s"] == 3600
    trend = view["fleet"]["trend"]
    assert len(trend) == HOURS
    for point in trend:  # vision busy and effective, speech idle, every hour alike
        assert point["allocated_gpu_hours"] == pytest.approx(2)
        assert point["active_gpu_hours"] == pytest.approx(1)
        assert point["effective_gpu_hours"] == pytest.approx(1)
    for key in KEYS:
        assert sum(p[key] for p in trend) == pytest.approx(view["fleet"][key]), key
    assert view["fleet"]["allocations"] == 2
    assert view["fleet"]["allocation_held_hours"] == pytest.approx(2 * HOURS)


def test_steps_are_aligned_and_zero_before_the_bindings_began(api, fleet):  # noqa: F811
    view = get(api, "funnel", window="24h", step="6h")
    trend = view["fleet"]["trend"]
    # [14:00, 18:00), then 6-hour steps on multiples of 6 h, the last cut at 14:00
    assert [p["start"][11:16] for p in trend] == ["14:00", "18:00", "00:00", "06:00", "12:00"]
    assert [round(p["allocated_gpu_hours"], 6) for p in trend] == [0, 0, 0, 6, 4]


def test_per_row_trends_and_usage_by_project(api, fleet):  # noqa: F811
    view = get(api, "funnel", by="project", window=f"{HOURS}h", step="1h")
    rows = {r["group"]["project"]: r for r in view["rows"]}
    assert [p["active_gpu_hours"] for p in rows["speech"]["trend"]] == [0] * HOURS
    assert rows["vision"]["trend"][0]["active_gpu_hours"] == pytest.approx(1)
    assert rows["vision"]["allocations"] == rows["speech"]["allocations"] == 1
    assert rows["speech"]["allocation_held_hours"] == pytest.approx(HOURS)
    for key in KEYS:
        assert sum(p[key] for r in rows.values() for p in r["trend"]) == \
            pytest.approx(view["fleet"][key])


def test_without_step_there_is_no_trend(api, fleet):  # noqa: F811
    view = get(api, "funnel", window="24h")
    assert view["step_s"] is None and view["fleet"]["trend"] is None
    assert view["fleet"]["allocations"] is None


def test_a_members_trend_counts_only_their_projects(api, fleet):  # noqa: F811
    view = get(fleet["member"], "funnel", by="project", window=f"{HOURS}h", step="1h")
    assert [r["group"]["project"] for r in view["rows"]] == ["vision"]
    assert view["fleet"]["trend"][0]["allocated_gpu_hours"] == pytest.approx(1)
    assert view["fleet"]["allocations"] == 1


@pytest.mark.parametrize(("params", "code"), [
    ({"step": "30s"}, "invalid_step"), ({"step": "90s"}, "invalid_step"),
    ({"step": "soon"}, "invalid_duration"), ({"step": "1m"}, "step_too_small")])
def test_a_bad_step_is_a_400_naming_it(api, fleet, params, code):  # noqa: F811
    body = get(api, "funnel", 400, window="24h", **params)
    assert body["error"]["code"] == code, body
    assert "step" in body["error"]["message"]


def test_the_idle_list_by_environment(api, fleet):  # noqa: F811
    assert [i["allocation"] for i in get(api, "idle", environment="onprem-hpc")["items"]] == \
        [fleet["speech"]]
    assert get(api, "idle", environment="elsewhere")["items"] == []


@pytest.mark.parametrize("step", ["2h", "20m", "90m"])  # 90m: cut per binding, not in SQL
def test_each_step_equals_the_funnel_over_that_step(api, fleet, step):  # noqa: F811
    """The definition: a step's figures are the funnel's over that step, the first and
    last cut at the window's edges."""
    view = get(api, "funnel", by="project", window="4h30m", step=step)  # from 09:30
    starts = [p["start"] for p in view["fleet"]["trend"]] + [view["window_end"]]
    for b, (begin, end) in enumerate(pairwise(starts)):
        hours = (_at(end) - _at(begin)).total_seconds() / 3600
        alone = {r["group"]["project"]: r for r in get(
            api, "funnel", by="project", window=f"{hours * 60:g}m", end=end)["rows"]}
        for row in view["rows"]:
            same = alone[row["group"]["project"]]
            for key in KEYS:
                assert row["trend"][b][key] == pytest.approx(same[key]), (begin, key)
    total = sum(p["allocated_gpu_hours"] for p in view["fleet"]["trend"])
    assert total == pytest.approx(2 * 4.5)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
