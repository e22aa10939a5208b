"""The event schema is stable: one golden example per family, produced by the real app
from a fixed scenario (docs/operations.md, "Families"). A change that alters an example
breaks readers: add fields only, or bump `schema`.

Regenerate after an intended change: REGENERATE_GOLDEN_EVENTS=1 pytest this file, then
review the diff of tests/data/events/golden.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.lifecycle_world import act, create

GOLDEN = Path(__file__).parents[1] / "data" / "events" / "golden.json"


def _scenario(api, member, operator) -> None:
    code = create(member, count=8, models=["H100-80GB"], same_node=True, reason="pretrain")["code"]
    act(operator, code, "approve", reason="capacity is there")
    act(member, code, "release")
    pool = api.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                           "count": 2, "reason": "steady training"}).json()
    operator.post(f"/api/v1/pools/{pool['code']}/approve", json={"reason": "ok"})
    operator.request("PUT", "/api/v1/projects/vision/quotas",
                     json={"flavour": "H100-80GB", "limit": 16})
    gpu = api.get("/api/v1/gpus", params={"limit": 1}).json()["items"][0]
    operator.post(f"/api/v1/gpus/{gpu['uuid']}/health",
                  json={"health": "quarantined", "reason": "XID 79: fallen off the bus"})
    operator.post("/api/v1/nodes/node-2/cordon", json={"reason": "maintenance"})
    operator.post("/api/v1/event-subscriptions", json={
        "name": "tickets", "url": "https://tickets.example.org/hook",
        "secret": "0123456789abcdef", "types": ["request.approved"],
        "where": ["data.count>=8"]})


def _stable(event: dict) -> dict:
    """Without what differs from run to run and database to database: database ids."""
    event = {**event, "id": "<id>"}
    if event["subject"]["kind"] == "token":
        event["subject"] = {**event["subject"], "id": "<token id>"}
    return event


def test_one_golden_event_per_family(h100s, api):
    member, operator = h100s
    _scenario(api, member, operator)
    events = api.get("/api/v1/events", params={"limit": 500}).json()["items"]
    first_of_type: dict[str, dict] = {}
    for event in events:
        first_of_type.setdefault(event["type"], _stable(event))
    if os.environ.get("REGENERATE_GOLDEN_EVENTS"):
        GOLDEN.write_text(json.dumps(first_of_type, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(first_of_type) == sorted(golden)
    for event_type, example in golden.items():
        assert first_of_type[event_type] == example, event_type
