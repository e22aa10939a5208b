"""Telemetry in: agents' batches (and, for `ingest` tokens, Prometheus remote-write)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import principal, services
from gpufleet.services.app import Gpufleet
from gpufleet.services.principal import Principal
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, TelemetryAck

router = APIRouter(tags=["telemetry"])


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
