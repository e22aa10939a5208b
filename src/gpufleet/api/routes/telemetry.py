"""Telemetry in: agents' batches (and, for `ingest` tokens, Prometheus remote-write).

Both routes are `RequestRoute`s: they carry most of the server's requests, so they skip
FastAPI's dependency solving and answer encoding (api/request_route.py). Each reads the
body, authenticates, and hands the body to the ingest core in one thread hand-off.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import bearer, request_principal
from gpufleet.api.request_route import RequestRoute
from gpufleet.services.telemetry.remote_write_ingest import ingest_remote_write
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, TelemetryAck

router = APIRouter(tags=["telemetry"], route_class=RequestRoute,
                   dependencies=[Depends(bearer)])
REMOTE_WRITE_PATH = "/api/v1/telemetry/remote-write"


@router.post(TELEMETRY_BATCHES_PATH, response_model=TelemetryAck, openapi_extra={
    "requestBody": {"required": True, "description": (
        "A gzip-compressed JSON `TelemetryBatch` (gpufleet.wire.telemetry_batch): one "
        "node's ticks, columnar."),
        "content": {"application/json": {"schema": {"type": "string", "format": "binary"}}}}})
async def post_batch(request: Request) -> Response:
    """Store one telemetry batch of the caller's node; the answer comes once it is durable.

    A batch id already stored is acknowledged as `duplicate` and not stored again. Samples
    that cannot be stored (an unknown metric, NaN, a time far off the server's clock) are
    dropped and counted in `dropped`; a batch that is malformed as a whole, too large, or
    names another node's GPUs is refused with a 4xx naming the problem.
    """
    p = await request_principal(request)
    body = await request.body()
    ack = await run_in_threadpool(request.app.state.gpufleet.ingest.ingest_batch, p, body)
    return Response(ack.model_dump_json(), media_type="application/json")


@router.post(REMOTE_WRITE_PATH, status_code=204, response_class=Response, openapi_extra={
    "requestBody": {"required": True, "description": (
        "A Prometheus remote-write 1.0 body: a snappy-compressed protobuf WriteRequest."),
        "content": {"application/x-protobuf": {
            "schema": {"type": "string", "format": "binary"}}}}})
async def remote_write(request: Request) -> Response:
    """Prometheus remote-write receiver for `ingest` tokens (point a Prometheus or vmagent
    that scrapes dcgm-exporter here). dcgm-exporter's series are mapped into the metric
    catalogue and stored under the node the inventory places their GPU on; what cannot be used
    is dropped and counted (`X-Gpufleet-Dropped` says how many, by reason), never refused
    as a whole, because a sender discards a body it gets a 4xx for."""
    p = await request_principal(request)
    body = await request.body()
    outcome = await run_in_threadpool(ingest_remote_write, request.app.state.gpufleet.ingest,
                                      p, body)
    dropped = ", ".join(f"{reason}={n}" for reason, n in sorted(outcome.items())
                        if reason != "stored")
    headers = {"X-Gpufleet-Stored": str(outcome["stored"])}
    if dropped:
        headers["X-Gpufleet-Dropped"] = dropped
    return Response(status_code=204, headers=headers)
