"""`/api/v1/billing/rates` (docs/billing.md, "Rate cards, stored"): prices round-trip
exactly, a change keeps the old price in force before it, every change is audited, only
administrators write, and bad input is a 4xx naming the problem — on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from gpufleet.services.billing.rates import rate_card
from gpufleet.store.tables import BillingRate
from tests.helpers import create_environment
from tests.lifecycle_world import people  # noqa: F401  (fixture)

PATH = "/api/v1/billing/rates"


def set_rate(api, expect: int = 201, **body):
    body = {"flavour": "H100-80GB", "price_per_unit_hour": "2.45", "currency": "EUR"} | body
    response = api.post(PATH, json=body)
    assert response.status_code == expect, response.text
    return response.json()


@pytest.mark.parametrize("price", ["0.1", "2.45", "1234567.123456789", "10", "0",
                                   "0.000000001", "999999999999999.999999999"])
def test_a_price_round_trips_exactly(api, gf, price):
    created = set_rate(api, price_per_unit_hour=price)
    assert created["price_per_unit_hour"] == price
    [listed] = api.get(PATH).json()
    assert listed["price_per_unit_hour"] == price
    with gf.store.read() as session:
        stored = session.scalars(select(BillingRate.price_per_unit_hour)).one()
    assert stored == Decimal(price) and format(stored, "f") == price


def test_a_json_number_is_taken_as_written(api):
    assert set_rate(api, price_per_unit_hour=0.1)["price_per_unit_hour"] == "0.1"


def test_a_change_keeps_the_old_price_in_force_before_it(api, gf):
    now = gf.clock.now()
    change = now + timedelta(days=10)
    first = set_rate(api, effective_from=now.isoformat(), price_per_unit_hour="2.00")
    second = set_rate(api, effective_from=change.isoformat(), price_per_unit_hour="2.50")
    listed = api.get(PATH).json()
    assert [(r["id"], r["price_per_unit_hour"]) for r in listed] == \
        [(first["id"], "2"), (second["id"], "2.5")]
    old = listed[0]
    assert old["effective_to"] == second["effective_from"] and old["ended_by"] == "user:admin"
    assert listed[1]["effective_to"] is None

    def in_force(at):
        return [r["price_per_unit_hour"] for r in api.get(PATH, params={"at": at.isoformat()})
                .json()]

    assert in_force(change - timedelta(microseconds=1)) == ["2"]
    assert in_force(change) == ["2.5"]
    assert in_force(now - timedelta(seconds=1)) == []
    with gf.store.read() as session:
        card = rate_card(session)
    assert card is not None and card.currency == "EUR"
    before = card.rate_at("H100-80GB", "onprem-hpc", change - timedelta(seconds=1))
    after = card.rate_at("H100-80GB", None, change)
    assert before.price_per_unit_hour == 2 and after.price_per_unit_hour == Decimal("2.5")
    # A MIG profile without its own rate is priced by weight from the stored card.
    mig = card.rate_at("H100-80GB/1g.10gb", None, change)
    assert mig.derived == "mig-weight" and mig.price_per_unit_hour * 7 == Decimal("2.5")


def test_every_change_is_audited(api, gf):
    now = gf.clock.now()
    first = set_rate(api, effective_from=now.isoformat())
    second = set_rate(api, effective_from=(now + timedelta(days=1)).isoformat(),
                      price_per_unit_hour="3")
    ended = api.post(f"{PATH}/{second['id']}/end",
                     json={"at": (now + timedelta(days=2)).isoformat()})
    assert ended.status_code == 200 and ended.json()["effective_to"] is not None
    events = api.get("/api/v1/audit-events",
                     params={"subject_kind": "billing_rate"}).json()["items"]
    assert [(e["action"], e["subject"]) for e in events] == [
        ("billing_rate.ended", str(second["id"])), ("billing_rate.set", str(second["id"])),
        ("billing_rate.ended", str(first["id"])), ("billing_rate.set", str(first["id"]))]
    assert all(e["actor"] == "user:admin" for e in events)
    assert events[1]["details"]["price_per_unit_hour"] == "3"
    assert events[1]["details"]["replaces"] == first["id"]


def test_everyone_reads_only_admins_write(api, people):  # noqa: F811
    member, operator = people
    rate = set_rate(api)
    viewer = api.as_(api.post("/api/v1/tokens", json={"name": "v", "role": "viewer"})
                     .json()["token"])
    for caller in (member, operator, viewer):
        assert [r["id"] for r in caller.get(PATH).json()] == [rate["id"]]
        refused = caller.post(PATH, json={"flavour": "H100-80GB", "currency": "EUR",
                                          "price_per_unit_hour": "1"})
        assert refused.status_code == 403, refused.text
        assert "may not manage rate cards" in refused.json()["error"]["message"]
        assert caller.post(f"{PATH}/{rate['id']}/end").status_code == 403
    [unchanged] = api.get(PATH).json()
    assert unchanged["effective_to"] is None and unchanged["price_per_unit_hour"] == "2.45"
    assert len(api.get("/api/v1/audit-events",
                       params={"subject_kind": "billing_rate"}).json()["items"]) == 1


def test_environment_and_flavour_filters(api):
    create_environment(api)
    create_environment(api, "cloud-a", kind="cloud", provider="aws", region="eu-west-1")
    anywhere = set_rate(api)
    onprem = set_rate(api, environment="onprem-hpc", price_per_unit_hour="1.8")
    set_rate(api, environment="cloud-a", price_per_unit_hour="4")
    a100 = set_rate(api, flavour="A100-80GB", price_per_unit_hour="1.2")
    here = api.get(PATH, params={"environment": "onprem-hpc"}).json()
    assert {r["id"] for r in here} == {anywhere["id"], onprem["id"], a100["id"]}
    assert [r["id"] for r in api.get(PATH, params={"flavour": "A100-80GB"}).json()] == \
        [a100["id"]]


@pytest.mark.parametrize(("body", "status", "code", "fragment"), [
    ({"flavour": "Z900"}, 400, "unknown_model", "unknown GPU model 'Z900'"),
    ({"flavour": "H100-80GB/9g.99gb"}, 400, "unknown_mig_profile", "no MIG profile '9g.99gb'"),
    ({"flavour": "h100-80gb"}, 400, "unknown_model", "h100-80gb"),
    ({"currency": "eur"}, 400, "invalid_currency", "'eur' is not an ISO 4217 code"),
    ({"price_per_unit_hour": "-1"}, 400, "invalid_rate", "price must be a finite amount ≥ 0"),
    ({"price_per_unit_hour": "NaN"}, 422, None, "price_per_unit_hour"),
    ({"price_per_unit_hour": "0.0000000001"}, 422, None, "price_per_unit_hour"),
    ({"price_per_unit_hour": "abc"}, 422, None, "price_per_unit_hour"),
    ({"environment": "nowhere"}, 404, "environment_not_found", "no environment 'nowhere'"),
    ({"effective_from": "2026-01-01T00:00:00"}, 422, None, "effective_from"),
    ({"effective_from": "2026-02-01T00:00:00Z", "effective_to": "2026-01-01T00:00:00Z"},
     400, "invalid_rate", "effective_to must be after effective_from"),
    ({"colour": "red"}, 422, None, "colour"),
])
def test_bad_input_is_a_4xx_naming_it(api, body, status, code, fragment):
    response = api.post(PATH, json={"flavour": "H100-80GB", "price_per_unit_hour": "2",
                                    "currency": "EUR"} | body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code
    assert fragment in response.text
    assert api.get(PATH).json() == []  # nothing half-written


def test_overlaps_and_conflicts_are_409s_naming_them(api, gf):
    now = gf.clock.now()
    open_rate = set_rate(api, effective_from=now.isoformat())
    same_start = set_rate(api, expect=409, effective_from=now.isoformat())["error"]
    assert same_start["code"] == "overlapping_rates"
    assert now.isoformat() in same_start["message"]
    earlier = set_rate(api, expect=409,
                       effective_from=(now - timedelta(days=1)).isoformat())["error"]
    assert earlier["code"] == "overlapping_rates"
    # A bounded rate inside the open one would leave it in force after: refused.
    bounded = set_rate(api, expect=409, effective_from=(now + timedelta(days=1)).isoformat(),
                       effective_to=(now + timedelta(days=2)).isoformat())["error"]
    assert bounded["code"] == "overlapping_rates"
    other = set_rate(api, expect=409, flavour="A100-80GB", currency="USD")["error"]
    assert other["code"] == "currency_mismatch" and "EUR, not USD" in other["message"]
    assert [r["id"] for r in api.get(PATH).json()] == [open_rate["id"]]
    assert api.get(PATH).json()[0]["effective_to"] is None


def test_ending_a_rate(api, gf):
    now = gf.clock.now()
    rate = set_rate(api, effective_from=now.isoformat())
    too_early = api.post(f"{PATH}/{rate['id']}/end", json={"at": now.isoformat()})
    assert too_early.status_code == 400 and too_early.json()["error"]["code"] == "invalid_rate"
    gf.clock.advance(3600)
    ended = api.post(f"{PATH}/{rate['id']}/end")
    assert ended.status_code == 200
    assert ended.json()["effective_to"] == gf.clock.now().isoformat().replace("+00:00", "Z")
    again = api.post(f"{PATH}/{rate['id']}/end")
    assert again.status_code == 409 and again.json()["error"]["code"] == "rate_already_ends"
    missing = api.post(f"{PATH}/999/end")
    assert missing.status_code == 404 and "no rate 999" in missing.json()["error"]["message"]
    assert api.post(f"{PATH}/0/end").status_code == 422
    # From its end on, a new price may start.
    set_rate(api, effective_from=gf.clock.now().isoformat(), price_per_unit_hour="3")


def test_bad_filters_are_4xx(api):
    unknown = api.get(PATH, params={"flavour": "Z900"})
    assert unknown.status_code == 400 and "Z900" in unknown.json()["error"]["message"]
    naive = api.get(PATH, params={"at": "2026-01-01T00:00:00"})
    assert naive.status_code == 422 and "at" in naive.text
    assert api.get(PATH, params={"at": "yesterday"}).status_code == 422
