"""`gpufleet billing rates ls | set | end`, `billing statement | export` (HTTP through the
test app)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.billing_world import statement_world
from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows


@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


@pytest.fixture
def world(api, gf, clock) -> dict:
    return statement_world(api, gf, clock)


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


def test_a_rate_with_an_idle_surcharge(cli, gf):
    rate = json_of("billing", "rates", "set", "L40S-48GB", "0.85", "-c", "USD",
                   "--idle-adjustment", "0.25")
    assert rate["idle_adjustment"] == "0.25"
    discounted = json_of("billing", "rates", "set", "A100-80GB", "1.25", "-c", "USD",
                         "--idle-adjustment", "-0.1")
    listed = ok("billing", "rates", "ls").stdout
    assert [r[5] for r in rows(listed, str(rate["id"]))] == ["+25%"]  # after "0.85 USD"
    assert [r[5] for r in rows(listed, str(discounted["id"]))] == ["-10%"]
    refused = invoke("billing", "rates", "set", "H100-80GB", "2", "-c", "USD",
                     "--idle-adjustment", "-2")
    assert_one_error_line(refused, "idle_adjustment")


def test_bad_input_is_one_error_line(cli):
    assert_one_error_line(invoke("billing", "rates", "set", "Z900", "1", "--currency", "EUR"),
                          "unknown GPU model 'Z900'")
    assert_one_error_line(invoke("billing", "rates", "set", "-c", "EUR", "--", "H100-80GB", "-1"),
                          "price must be a finite amount ≥ 0")
    assert_one_error_line(invoke("billing", "rates", "end", "42"), "no rate 42")


def test_statement_table_and_json(cli, api, world):
    span = ("--start", world["t0"].isoformat(),
            "--end", (world["t0"] + timedelta(hours=5)).isoformat())
    table = ok("billing", "statement", *span).stdout
    [vision] = rows(table, "vision")
    assert vision[1:4] == ["8.00", "3.00", "8.00"]
    assert vision[-3:] == ["16.00", "0.00", "16.00"]
    assert "EUR" in table and "total 20.00" in table
    by_model = json_of("billing", "statement", *span, "--by", "department", "--group", "model")
    assert [(r["key"], [g["group"] for g in r["groups"]]) for r in by_model["rows"]] == \
        [(None, []), ("audio", ["H100-80GB"]), ("cv", ["H100-80GB"])]  # ledger: none
    assert_one_error_line(invoke("billing", "statement", "--month", "11-2026"),
                          "invalid_month")


def test_export_writes_the_apis_csv_and_json(cli, api, world, tmp_path):
    span = {"start": world["t0"].isoformat(),
            "end": (world["t0"] + timedelta(hours=5)).isoformat(), "group": "flavour"}
    args = ("--start", span["start"], "--end", span["end"], "--group", "flavour")
    target = tmp_path / "statement.csv"
    said = ok("billing", "export", *args, "-o", target)
    assert "3 rows" in said.stdout
    from_api = api.get("/api/v1/billing/statements", params={**span, "format": "csv"}).text
    assert target.read_text() == from_api
    as_json = json.loads(ok("billing", "export", *args, "--format", "json").stdout)
    assert as_json == api.get("/api/v1/billing/statements", params=span).json()
    assert_one_error_line(invoke("billing", "export", *args, "--format", "xml"),
                          "--format must be csv or json")
