"""`gpufleet query | funnel | idle | top` against the real app (HTTP through the test app)."""

from __future__ import annotations

import pytest

from tests.test_cli import assert_one_error_line, invoke, json_of, ok, rows
from tests.test_telemetry_queries import HOURS, fleet  # noqa: F401  (the fixture)


@pytest.fixture
def cli(cli_in_process, fleet) -> dict:  # noqa: F811
    return fleet


def test_query_prints_a_table_and_json(cli):
    out = ok("query", "gpu.sm_active", "--by", "project", "--since", "5h", "--step", "1h").stdout
    assert rows(out, "vision")[0][:2] == ["vision", "60.0"]
    assert rows(out, "speech")[0][:2] == ["speech", "0.0"]
    data = json_of("query", "gpu.sm_active", "--by", "project", "--since", "5h", "--step", "1h")
    assert {s["labels"]["project"] for s in data["series"]} == {"vision", "speech"}


def test_bad_input_is_one_error_line(cli):
    assert_one_error_line(invoke("query", "gpu.nope"), "unknown metric")
    assert_one_error_line(invoke("query", "gpu.sm_active", "--since", "soon"), "soon")
    assert_one_error_line(invoke("funnel", "--by", "colour"), "colour")


def test_funnel(cli):
    out = ok("funnel", "--by", "project", "--window", "24h").stdout
    vision = rows(out, "vision")[0]
    assert vision[:1] == ["vision"] and f"{HOURS:.1f}" in vision
    assert rows(out, "fleet")
    data = json_of("funnel", "--window", "24h")
    assert data["fleet"]["total_gpu_hours"] == pytest.approx(4 * HOURS)


def test_idle(cli):
    out = ok("idle").stdout
    assert rows(out, cli["speech"])[0][-3:-2] == ["idle_held"] or "idle_held" in out
    assert [i["allocation"] for i in json_of("idle", "--held-only")["items"]] == [cli["speech"]]


def test_top_once(cli):
    out = ok("top", "--once", "--limit", "2").stdout
    assert "busiest" in out and cli["busy"] in out
    assert json_of("top", "--limit", "1")["busiest"][0]["gpu_uuid"] == cli["busy"]
