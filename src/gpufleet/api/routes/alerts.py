"""Alerts, their history, acknowledgement and silences (docs/operations.md, "Alert rules")."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query

from gpufleet.api.deps import PageRequest, page_request, principal, services
from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.domain.operations.matchers import parse_matchers
from gpufleet.domain.operations.notifications import Severity
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.operations.alert_queries import AlertFilter
from gpufleet.wire.alerts import AlertAck, AlertHistoryView, AlertView, SilenceCreate, SilenceView
from gpufleet.wire.base import Page

router = APIRouter(prefix="/api/v1")
TAGS = ["alerts"]
Fingerprint = Path(min_length=1, max_length=32, description="The alert's fingerprint.")


@router.get("/alerts", response_model=Page[AlertView], tags=TAGS)
def list_alerts(
    state: list[AlertState] = Query(default=[], description="Only alerts in this state."),
    rule: list[str] = Query(default=[], description="Only alerts of this rule."),
    severity: list[Severity] = Query(default=[]),
    project: list[str] = Query(default=[], description="Only alerts naming this project."),
    environment: list[str] = Query(default=[]),
    matcher: list[str] = Query(default=[], description=(
        "Label matchers, all of which must match: `key=value`, `key!=value`, `key=~regex`, "
        "`key!~regex`; `alertname` is the rule.")),
    page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    """Alerts, newest first. Members see their projects' alerts and fleet-wide ones."""
    f = AlertFilter(states=state, rules=rule, severities=severity, projects=project,
                    environments=environment, matchers=parse_matchers(matcher))
    return gf.list_alerts(p, f, page.cursor, page.limit)


@router.get("/alerts/history", response_model=Page[AlertHistoryView], tags=TAGS)
def alert_history(
    fingerprint: str | None = Query(default=None, max_length=32),
    rule: str | None = Query(default=None, max_length=127),
    page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    """What happened to alerts, newest first: state changes, acknowledgements, notices."""
    return gf.alert_history(p, fingerprint=fingerprint, rule=rule, cursor=page.cursor,
                            limit=page.limit)


@router.get("/alerts/{fingerprint}", response_model=AlertView, tags=TAGS)
def get_alert(fingerprint: str = Fingerprint, p: Principal = Depends(principal),
              gf: Gpufleet = Depends(services)):
    return gf.get_alert(p, fingerprint)


@router.post("/alerts/{fingerprint}/ack", response_model=AlertView, tags=TAGS)
def acknowledge_alert(body: AlertAck | None = None, fingerprint: str = Fingerprint,
                      p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Acknowledge: no repeat notifications for `duration`, or until it resolves."""
    return gf.acknowledge_alert(p, fingerprint, body or AlertAck())


@router.post("/silences", response_model=SilenceView, status_code=201, tags=TAGS)
def create_silence(body: SilenceCreate, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    """Mute the alerts the matchers match for a while; at least one matcher."""
    return gf.create_silence(p, body)


@router.get("/silences", response_model=Page[SilenceView], tags=TAGS)
def list_silences(include_expired: bool = False, page: PageRequest = Depends(page_request),
                  p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Silences, newest first; expired ones with `include_expired`."""
    return gf.list_silences(p, include_expired=include_expired, cursor=page.cursor,
                            limit=page.limit)


@router.delete("/silences/{silence_id}", response_model=SilenceView, tags=TAGS)
def expire_silence(silence_id: int, p: Principal = Depends(principal),
                   gf: Gpufleet = Depends(services)):
    """Expire a silence now; it stays listed with `include_expired`."""
    return gf.expire_silence(p, silence_id)
