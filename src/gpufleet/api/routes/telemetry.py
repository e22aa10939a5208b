"""Telemetry in: agents' batches (and, for `ingest` tokens, Prometheus remote-write)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import principal, services
from gpufleet.services.app import Gpufleet
from gpufleet.services.principal import Principal
from gpufleet.services.remote_write_ingest import ingest_remote_write
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, TelemetryAck

router = APIRouter(tags=["telemetry"])
REMOTE_WRITE_PATH = "/api/v1/telemetry/remote-write"


@router.post(TELEMETRY_BATCHES_PATH, response_model=TelemetryAck, openapi_extra={
    "requestBody": {"required": True, "description": (
        "A gzip-compressed JSON `TelemetryBatch` (gpufleet.wire.telemetry_batch): one "
        "node's ticks, columnar."),
        "content": {"application/json": {"schema": {"type": "string", "format": "binary"}}}}})
async def post_batch(request: Request, p: Principal = Depends(principal),
                     gf: Gpufleet = Depends(services)) -> TelemetryAck:
    """Store one telemetry batch of the caller's node; the answer comes once it is durable.

    A batch id already stored is acknowledged as `duplicate` and not stored again. Samples
    that cannot be stored (an unknown metric, NaN, a time far off the server's clock) are
    dropped and counted in `dropped`; a batch that is malformed as a whole, too large, or
    names another node's GPUs is refused with a 4xx naming the problem.
    """
    body = await request.body()
    return await run_in_threadpool(gf.ingest.ingest_batch, p, body)


@router.post(REMOTE_WRITE_PATH, status_code=204, openapi_extra={
    "requestBody": {"required": True, "description": (
        "A Prometheus remote-write 1.0 body: a snappy-compressed protobuf WriteRequest."),
        "content": {"application/x-protobuf": {
            "schema": {"type": "string", "format": "binary"}}}}})
async def remote_write(request: Request, p: Principal = Depends(principal),
                       gf: Gpufleet = Depends(services)) -> Response:
    """Prometheus remote-write receiver for `ingest` tokens (point a Prometheus or vmagent
    that scrapes dcgm-exporter here). dcgm-exporter's series are mapped into the metric
    catalogue and stored under the node their `Hostname` label names; what cannot be used
    is dropped and counted (`X-Gpufleet-Dropped` says how many, by reason), never refused
    as a whole, because a sender discards a body it gets a 4xx for."""
    body = await request.body()
    outcome = await run_in_threadpool(ingest_remote_write, gf.ingest, p, body)
    dropped = ", ".join(f"{reason}={n}" for reason, n in sorted(outcome.items())
                        if reason != "stored")
    headers = {"X-Gpufleet-Stored": str(outcome["stored"])}
    if dropped:
        headers["X-Gpufleet-Dropped"] = dropped
    return Response(status_code=204, headers=headers)
