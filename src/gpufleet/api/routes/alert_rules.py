"""Alert rules (docs/operations.md, "Alert rules"): everyone reads them, operators and
admins write them, and anyone who reads the inventory may test a rule file against the
fleet's data now (`gpufleet rules ls | test`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Response

from gpufleet.api.deps import principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.alert_rules import AlertRuleView, RuleTestReply

router = APIRouter(prefix="/api/v1", tags=["alert rules"])

RULE_EXAMPLE = {"kind": "threshold", "severity": "warning", "metric":
                "gpu.temperature_celsius", "op": ">=", "value": 85, "for": "10m",
                "summary": "{gpu} on {node} at {value:.0f} °C"}


@router.get("/alert-rules", response_model=list[AlertRuleView])
def list_alert_rules(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The rules in effect: the default pack, with the rules stored here laid over it."""
    return gf.list_alert_rules(p)


@router.post("/alert-rules/test", response_model=RuleTestReply)
def test_alert_rules(body: dict[str, Any] = Body(examples=[{"rules": [
                         RULE_EXAMPLE | {"name": "hot-gpu"}]}]),
                     p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Evaluate a rule file's rules (its document as JSON, `{"rules": [...]}`) against
    the fleet's data now: what each would observe. Nothing is stored or sent."""
    return gf.test_alert_rules(p, body)


@router.get("/alert-rules/{name}", response_model=AlertRuleView)
def get_alert_rule(name: str, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    return gf.get_alert_rule(p, name)


@router.put("/alert-rules/{name}", response_model=AlertRuleView)
def put_alert_rule(name: str, body: dict[str, Any] = Body(examples=[RULE_EXAMPLE]),
                   p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Create or replace a rule (a rule file's table as JSON). A default rule's name
    replaces that default; `"enabled": false` switches it off."""
    return gf.put_alert_rule(p, name, body)


@router.delete("/alert-rules/{name}", status_code=204, response_class=Response)
def delete_alert_rule(name: str, p: Principal = Depends(principal),
                      gf: Gpufleet = Depends(services)):
    """Delete a stored rule (a default rule it replaced comes back)."""
    gf.delete_alert_rule(p, name)
    return Response(status_code=204)
