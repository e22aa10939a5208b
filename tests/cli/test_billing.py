"""`gpufleet billing rates ls | set | end` (HTTP through the test app)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows


@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


def test_set_list_and_end_rates(cli, gf):
    now = gf.clock.now()
    assert "no rates yet" in ok("billing", "rates", "ls").stderr
    first = json_of("billing", "rates", "set", "H100-80GB", "2.45", "--currency", "EUR",
                    "--from", now.isoformat())
    assert first["price_per_unit_hour"] == "2.45"
    later = (now + timedelta(days=30)).isoformat()
    said = ok("billing", "rates", "set", "H100-80GB", "0.1", "-c", "EUR", "--from", later)
    assert "H100-80GB in any environment at 0.1 EUR per unit-hour" in said.stdout
    listed = ok("billing", "rates", "ls").stdout
    assert [r[3] for r in rows(listed, str(first["id"]))] == ["2.45"]
    assert "open" in listed and "0.1" in listed
    in_force = json_of("billing", "rates", "ls", "--at", now.isoformat())
    assert [r["id"] for r in in_force] == [first["id"]]
    second = json_of("billing", "rates", "ls", "--at", later)[0]["id"]
    assert_one_error_line(invoke("billing", "rates", "end", str(second)),
                          "effective_to must be after effective_from")
    ended = ok("billing", "rates", "end", str(second), "--at",
               (now + timedelta(days=31)).isoformat())
    assert f"rate {second} (H100-80GB) ends at" in ended.stdout
    assert json_of("billing", "rates", "ls", "--flavour", "A100-80GB") == []


def test_bad_input_is_one_error_line(cli):
    assert_one_error_line(invoke("billing", "rates", "set", "Z900", "1", "--currency", "EUR"),
                          "unknown GPU model 'Z900'")
    assert_one_error_line(invoke("billing", "rates", "set", "-c", "EUR", "--", "H100-80GB", "-1"),
                          "price must be a finite amount ≥ 0")
    assert_one_error_line(invoke("billing", "rates", "end", "42"), "no rate 42")
