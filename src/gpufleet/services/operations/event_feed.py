"""Wait for events without holding the state store: the long poll and the stream
(docs/operations.md, "Listing and waiting", "Streaming").

Each read is one short read transaction in a worker thread; between reads the waiter
holds nothing but a place on the bell.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gpufleet.services.operations.event_bell import EventBell
from gpufleet.wire.events import EventPage

T = TypeVar("T")
Run = Callable[[Callable[[], T]], Awaitable[T]]
MAX_WAIT_S = 30.0


async def wait_for_events(read: Callable[[], EventPage], bell: EventBell, *, wait_s: float,
                          poll_s: float, run: Run = asyncio.to_thread) -> EventPage:
    """`read()` until it returns events or `wait_s` passes (then its last, empty, page).
    Woken by the bell when this process commits events; reads again every `poll_s`
    anyway, for events other processes commit."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, wait_s)
    while True:
        ticket = bell.ticket()
        page = await run(read)
        remaining = deadline - loop.time()
        if page.items or remaining <= 0:
            return page
        await bell.wait(ticket, min(poll_s, remaining))
