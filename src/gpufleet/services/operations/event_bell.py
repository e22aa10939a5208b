"""Wake the readers waiting for events (long polls, streams) when events commit.

A waiting reader holds no database connection: it waits here, and reads the store again
when the bell rings (an event committed in this process) or when its poll interval
passes (an event another replica committed). The bell carries no data; the store is the
truth, the bell only says "look again".
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class EventBell:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._rings = 0

    def ticket(self) -> int:
        """Take before reading the store; `wait(ticket, …)` then returns at once if the
        bell rang since, so an event committed between the read and the wait is not
        missed."""
        with self._lock:
            return self._rings

    def ring(self) -> None:
        """Wake every waiter; safe from any thread (the committing one is a worker)."""
        with self._lock:
            self._rings += 1
            waiters, self._waiters = self._waiters, set()
        for loop, woken in waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
                loop.call_soon_threadsafe(woken.set)

    async def wait(self, ticket: int, timeout_s: float) -> bool:
        """Until the bell rings after `ticket` was taken (True) or `timeout_s` passes
        (False)."""
        woken = asyncio.Event()
        entry = (asyncio.get_running_loop(), woken)
        with self._lock:
            if self._rings != ticket:
                return True
            self._waiters.add(entry)
        try:
            await asyncio.wait_for(woken.wait(), timeout=max(0.0, timeout_s))
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiters.discard(entry)
