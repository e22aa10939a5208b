"""`GET /metrics`: the fleet's state for Prometheus, in its text exposition format.

Authenticated like every endpoint (docs/design.md, "Security"): give Prometheus a viewer token as
its scrape `authorization` credentials. The numbers come from services/telemetry/server_metrics.py;
prometheus-client renders them, so the format is exactly what Prometheus parses.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpufleet.api.deps import principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.telemetry.server_metrics import Family

router = APIRouter(tags=["prometheus"])


class _Snapshot:
    """A collector over families gathered once for this scrape."""

    def __init__(self, families: list[Family]):
        self._families = families

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            kind = CounterMetricFamily if family.counter else GaugeMetricFamily
            metric = kind(family.name, family.help, labels=family.label_names)
            for labels, value in sorted(family.samples.items()):
                metric.add_metric([v for _, v in labels], value)
            yield metric


@router.get("/metrics", response_class=Response, responses={200: {
    "description": "Prometheus text exposition format.",
    "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}})
def metrics(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)) -> Response:
    """GPUs by environment, model and status; nodes by status; GPUs allocated per project;
    requests by state; agent silence per environment; the funnel by environment; what
    telemetry ingest stored, dropped and refused since start; showback — this month's cost
    and GPU-hours per project (`gpufleet_cost_*`, as the upkeep last computed them)."""
    families = gf.server_metrics(p)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
