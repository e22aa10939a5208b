"""Events: the audit log read as events — listed, long-polled, streamed — and webhook
subscriptions to them (docs/operations.md, "Events")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter, Depends, Header, Query, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import (
    PageRequest,
    caller,
    page_limit,
    page_request,
    principal,
    raw_token,
    services,
)
from gpufleet.domain.access import Action
from gpufleet.domain.errors import GpufleetError, InvalidInput
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.operations.event_feed import MAX_WAIT_S, wait_for_events
from gpufleet.services.operations.events import EventFilter
from gpufleet.wire.base import Page
from gpufleet.wire.events import EventPage, EventSubscriptionCreate, EventSubscriptionView

router = APIRouter(prefix="/api/v1")
EVENTS = ["events"]
MAX_EVENT_ID = 2**63 - 1


def event_filter(
        types: list[str] | None = Query(default=None, alias="type", description=(
            "Event type globs, any may match: `request.*`, `gpu.health_changed`. Repeat "
            "for several.")),
        subject_kind: str | None = Query(default=None, max_length=31, description=(
            "Only events about this kind of subject: request, pool, gpu, node, …")),
        subject: str | None = Query(default=None, max_length=253,
                                    description="Only events about this subject (its id)."),
        project: str | None = Query(default=None, max_length=63,
                                    description="Only events about this project.")
) -> EventFilter:
    return EventFilter(types=tuple(types or ()), subject_kind=subject_kind, subject=subject,
                       project=project)


@router.get("/events", response_model=EventPage, response_model_by_alias=True, tags=EVENTS)
async def list_events(
        wanted: EventFilter = Depends(event_filter),
        after: int | None = Query(default=None, ge=0, le=MAX_EVENT_ID, description=(
            "Only events after this id: the `last_id` of the previous page. Absent: from "
            "the first event.")),
        from_now: bool = Query(default=False, description=(
            "Start after the newest event (instead of `after`): with `wait_s`, the next "
            "event that happens.")),
        limit: int | None = None,
        wait_s: float = Query(default=0, ge=0, le=MAX_WAIT_S, description=(
            "Long poll: when no event is there yet, wait up to this long for one, and "
            "answer as soon as one is.")),
        p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Events after the cursor, oldest first (schema 1: docs/operations.md, "Events").
    Members see only the events about their projects."""
    size = page_limit(limit, gf)
    if from_now:
        if after is not None:
            raise InvalidInput("give `after` or `from_now`, not both", code="invalid_cursor",
                               details={"after": after})
        after = await run_in_threadpool(gf.latest_event_id, p)
    return await wait_for_events(lambda: gf.events_page(p, wanted, after, size), gf.event_bell,
                                 wait_s=wait_s, poll_s=gf.settings.event_poll_interval_s,
                                 run=run_in_threadpool)


@router.get("/events/stream", tags=EVENTS, response_class=EventSourceResponse, responses={
    200: {"description": "Server-Sent Events: one `data:` line of event JSON per event, its "
                         "id as `id:`; comments as heartbeats.",
          "content": {"text/event-stream": {"schema": {"type": "string"}}}}})
async def stream_events(
        wanted: EventFilter = Depends(event_filter),
        after: int | None = Query(default=None, ge=0, le=MAX_EVENT_ID, description=(
            "Start after this event id; absent: with the events that happen from now on.")),
        limit: int | None = Query(default=None, ge=1, le=1_000_000, description=(
            "End the stream after this many events (a script waiting for one); absent: "
            "never.")),
        last_event_id: str | None = Header(default=None, description=(
            "Sent by an EventSource that reconnects: resume after this id (wins over "
            "`after`).")),
        token: str = Depends(raw_token),
        p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Events as they happen, as Server-Sent Events; resumable with `Last-Event-ID`. The
    stream ends when the server shuts down, or when the token stops being valid."""
    p.require(Action.READ_EVENTS)
    start = _resume_point(last_event_id, after)
    if start is None:
        start = await run_in_threadpool(gf.latest_event_id, p)
    # On shutdown the library sets `stopping`; the stream then ends itself, with the
    # chunked body's last chunk, before uvicorn's graceful-shutdown timeout (5 s) runs out.
    stopping = anyio.Event()
    return EventSourceResponse(_event_stream(gf, token, wanted, start, stopping, limit),
                               ping=gf.settings.event_stream_heartbeat_s,
                               shutdown_event=stopping, shutdown_grace_period=3,
                               headers={"Cache-Control": "no-store",
                                        "X-Accel-Buffering": "no"})


async def _event_stream(gf: Gpufleet, token: str, wanted: EventFilter, after: int,
                        stopping: anyio.Event, limit: int | None) -> AsyncIterator[dict]:
    size = gf.settings.page_size_max
    left = limit
    while not stopping.is_set():
        try:  # the caller again each round: a revoked token or a lost membership counts
            current = await caller(token, gf)
        except GpufleetError:
            return
        waiting = asyncio.ensure_future(wait_for_events(
            lambda c=current, a=after: gf.events_page(c, wanted, a, size), gf.event_bell,
            wait_s=MAX_WAIT_S, poll_s=gf.settings.event_poll_interval_s,
            run=run_in_threadpool))
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({waiting, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not waiting.done():
            waiting.cancel()
            return
        page = waiting.result()
        for event in page.items:
            yield {"id": str(event.id),
                   "data": event.model_dump_json(by_alias=True)}
            if left is not None:
                left -= 1
                if left == 0:
                    return
        after = page.last_id


def _resume_point(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is None or not last_event_id.strip():
        return after
    text = last_event_id.strip()
    if not text.isdigit() or int(text) > MAX_EVENT_ID:
        raise InvalidInput(f"Last-Event-ID {text[:40]!r} is not an event id",
                           code="invalid_cursor", details={"last_event_id": text[:40]})
    return int(text)


# --- subscriptions ---------------------------------------------------------------------
@router.post("/event-subscriptions", response_model=EventSubscriptionView, status_code=201,
             tags=EVENTS)
def create_event_subscription(body: EventSubscriptionCreate, p: Principal = Depends(principal),
                              gf: Gpufleet = Depends(services)):
    """Send the events matching `types` and every `where` condition to `url`, signed with
    `secret`, through the outbox: at least once, retried (docs/operations.md,
    "Subscriptions"). A bad glob or condition is a 400 that names it."""
    return gf.create_event_subscription(p, body)


@router.get("/event-subscriptions", response_model=Page[EventSubscriptionView], tags=EVENTS)
def list_event_subscriptions(page: PageRequest = Depends(page_request),
                             p: Principal = Depends(principal),
                             gf: Gpufleet = Depends(services)):
    """Event subscriptions, by name; never their secrets."""
    return gf.list_event_subscriptions(p, page.cursor, page.limit)


@router.delete("/event-subscriptions/{name}", status_code=204, response_class=Response,
               tags=EVENTS)
def delete_event_subscription(name: str, p: Principal = Depends(principal),
                              gf: Gpufleet = Depends(services)):
    """Remove the subscription; what it had queued and not delivered goes with it."""
    gf.delete_event_subscription(p, name)
    return Response(status_code=204)
