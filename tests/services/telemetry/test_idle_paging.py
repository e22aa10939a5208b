"""The idle list is paged like the other listings (`limit`, `cursor` → `next_cursor`),
longest idle first, and `gpufleet idle` still shows every item (it follows the pages)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.settings import Settings
from tests.cli.test_cli import json_of, ok
from tests.helpers import create_environment, register
from tests.services.telemetry.test_queries import ATTRS, GIB, get, grant, minutes

HOURS = 5


@pytest.fixture
def settings(tmp_path) -> Settings:
    """A page of two by default, so the CLI has to follow pages."""
    return Settings(data_dir=tmp_path / "data", heartbeat_interval_s=30,
                    unreachable_after_missed_heartbeats=3, page_size_default=2)


@pytest.fixture
def idle_fleet(api, gf, clock) -> dict:
    """Five idle allocations on node-1: three idle since they were granted (one holding
    memory), two busy for their first 10 / 20 minutes. Returns their codes longest idle
    first, as the list orders them (ties: by allocation code), and the one holding memory."""
    create_environment(api)
    register(api, 1, gpus=6)
    api.post("/api/v1/projects", json={"name": "speech", "organisation": "research"})
    start = clock.now()
    granted = [grant(gf, "speech") for _ in range(5)]
    for n, (_, uuid) in enumerate(granted):
        busy_minutes = {3: 10, 4: 20}.get(n, 0)
        memory = 2.0 * GIB if n == 0 else 0.0
        minutes(gf, start, uuid, {"gpu.gr_engine_active": 90.0, "gpu.memory_used_bytes": memory},
                count=busy_minutes)
        later = start + timedelta(minutes=busy_minutes)
        minutes(gf, later, uuid, {"gpu.gr_engine_active": 1.0, "gpu.memory_used_bytes": memory},
                count=HOURS * 60 - busy_minutes)
    clock.advance(HOURS * 3600)
    gf.telemetry.rollup(clock.now())
    codes = [code for code, _ in granted]
    return {"order": sorted(codes[:3]) + codes[3:], "held": codes[0]}


def every_page(api, limit: int, **params) -> tuple[list[dict], int]:
    items, pages, cursor = [], 0, None
    while True:
        page = get(api, "idle", limit=limit, **params, **({"cursor": cursor} if cursor else {}))
        items += page["items"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return items, pages


def test_pages_add_up_to_the_whole_list_longest_idle_first(api, idle_fleet):
    whole = get(api, "idle", limit=100)
    assert whole["next_cursor"] is None
    assert [i["allocation"] for i in whole["items"]] == idle_fleet["order"]
    since = [i["idle_since"] for i in whole["items"]]
    assert since == sorted(since) and since[2] < since[3] < since[4]
    for limit in (1, 2, 3, 5):
        items, pages = every_page(api, limit)
        assert items == whole["items"]
        assert pages == -(-5 // limit)


def test_the_default_page_is_the_settings_and_held_only_pages_too(api, idle_fleet):
    first = get(api, "idle")
    assert len(first["items"]) == 2 and first["next_cursor"]
    held, _ = every_page(api, 1, held_only="true")
    assert [(i["allocation"], i["state"]) for i in held] == [(idle_fleet["held"], "idle_held")]


@pytest.mark.parametrize("cursor", ["nonsense", "WyJ4Il0", "WzEsMiwzLDRd"])
def test_a_cursor_it_did_not_issue_is_a_400(api, idle_fleet, cursor):
    body = get(api, "idle", expect=400, cursor=cursor)
    assert body["error"]["code"] == "invalid_cursor"


def test_a_bad_limit_is_a_400(api, idle_fleet):
    assert get(api, "idle", expect=400, limit=0)["error"]["code"] == "invalid_limit"


def test_the_cli_shows_every_page(cli_in_process, idle_fleet):
    out = ok("idle").stdout
    for code in idle_fleet["order"]:
        assert code in out
    data = json_of("idle")
    assert [i["allocation"] for i in data["items"]] == idle_fleet["order"]
    assert data["next_cursor"] is None
    assert ATTRS["node"] in out
