"""One agent's telemetry loop: collect every `collect_interval_s`, seal a batch every
`upload_interval_s`, upload the spool (docs/design.md, "Architecture" and "Reliability").

Collection runs in a worker thread (`asyncio.to_thread`): a slow NVML call or a slow
dcgm-exporter scrape must not stall the heartbeats on the event loop. A collection that
fails — `SourceUnavailable` or any other exception — is logged, counted, and the loop goes
on to the next tick; nothing a backend does ends the agent.

When the server cannot take batches, they stay spooled and the next attempt waits a capped,
jittered backoff (in logical time: the loop's own intervals, so tests need no clock);
collection and spooling go on meanwhile. A 401 ends the loop with the `Unauthorized` it got:
the runner reports it as it does for heartbeats. What a collection, a seal and an upload do
(counting, the server's node name, a 403's re-registration) is the uploader's
(`TelemetryUploader`), shared with the simulated fleet: this loop only schedules.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gpufleet.wire.telemetry import NodeSnapshot

from .backend import SourceUnavailable, TelemetrySource
from .backoff import Backoff
from .client import Unauthorized
from .options import TelemetryOptions
from .telemetry_uploader import TelemetryUploader, UploadOutcome

log = logging.getLogger(__name__)

Wait = Callable[[asyncio.Event, float], Awaitable[bool]]
SnapshotListener = Callable[[NodeSnapshot], None]
MAX_BATCHES_PER_UPLOAD = 100  # after a long outage, replay in slices between ticks
__all__ = ["TelemetryLoop", "TelemetryOptions", "collect_in_thread", "collect_once"]


def collect_once(source: TelemetrySource) -> NodeSnapshot | SourceUnavailable:
    """One collection; the failure as a value, never raised."""
    try:
        return source.collect()
    except SourceUnavailable as exc:
        return exc
    except Exception as exc:  # a backend bug must not end the agent
        log.exception("telemetry collection failed unexpectedly")
        return SourceUnavailable(f"collection failed: {type(exc).__name__}: {exc}")


async def collect_in_thread(source: TelemetrySource) -> NodeSnapshot | SourceUnavailable:
    """One collection in a worker thread; the failure as a value, never raised."""
    return await asyncio.to_thread(collect_once, source)


class TelemetryLoop:
    def __init__(self, source: TelemetrySource, uploader: TelemetryUploader,
                 credential: Callable[[], str | None], options: TelemetryOptions, *,
                 wait: Wait, backoff: Backoff | None = None,
                 on_snapshot: SnapshotListener | None = None,
                 monotonic_s: Callable[[], float] = time.monotonic):
        self.source = source
        self.uploader = uploader
        self.credential = credential
        self.options = options
        self.backoff = backoff or Backoff(
            initial_s=min(options.upload_interval_s, options.first_retry_s), max_s=600.0)
        self.on_snapshot = on_snapshot
        self._wait = wait
        self._monotonic_s = monotonic_s
        self._elapsed_s = 0.0  # logical time: the sum of this loop's intervals
        self._next_seal_s = options.upload_interval_s
        self._retry_at_s: float | None = None
        self._spent_s = 0.0

    async def collect(self) -> NodeSnapshot | None:
        """Collect one tick into the upload buffer (and to `on_snapshot`); None on failure."""
        snapshot = self.uploader.collected(await collect_in_thread(self.source))
        if snapshot is not None and self.on_snapshot is not None:
            try:
                self.on_snapshot(snapshot)
            except Exception:
                log.exception("a snapshot listener failed")
        return snapshot

    async def seal(self) -> None:
        if self.uploader.buffered:
            await asyncio.to_thread(self.uploader.seal)  # columnar + gzip + fsync
        self._next_seal_s = self._elapsed_s + self.options.upload_interval_s

    async def upload(self) -> UploadOutcome:
        """Send what is spooled (a slice of it after a long outage) and plan the next
        attempt: the next seal when all went, the next tick when a slice is left, a backoff
        when the server was unavailable. Raises Unauthorized."""
        credential = self.credential()
        if credential is None:
            return UploadOutcome.UNAVAILABLE
        outcome = await self.uploader.upload(credential, MAX_BATCHES_PER_UPLOAD)
        if outcome is UploadOutcome.DONE:
            self.backoff.reset()
            self._retry_at_s = None
        elif outcome in (UploadOutcome.MORE, UploadOutcome.REGISTERING):
            self._retry_at_s = self._elapsed_s  # the next tick (the heartbeats register)
        else:
            self._retry_at_s = self._elapsed_s + self.backoff.next_delay_s()
        return outcome

    def _upload_due(self, sealed: bool) -> bool:
        if not self.uploader.pending():
            return False
        if self._retry_at_s is not None:
            return self._elapsed_s >= self._retry_at_s
        return sealed

    async def tick(self) -> None:
        """One collection, and a seal and an upload when they are due. Raises
        Unauthorized."""
        started_s = self._monotonic_s()
        await self.collect()
        sealed = self.uploader.full or self._elapsed_s + 1e-9 >= self._next_seal_s
        if sealed:
            await self.seal()
        first = self._elapsed_s == 0.0  # replay what an earlier run left in the spool
        if self._upload_due(sealed or first):
            await self.upload()
        self._spent_s = self._monotonic_s() - started_s

    async def run(self, stop_event: asyncio.Event) -> Unauthorized | None:
        """Tick until stopped; the Unauthorized that ended it, if one did. What is buffered
        at the stop is sealed into the spool, for the next start to send."""
        try:
            while not stop_event.is_set():
                try:
                    await self.tick()
                except Unauthorized as exc:
                    return exc
                delay_s = max(0.0, self.options.collect_interval_s - self._spent_s)
                if await self._wait(stop_event, delay_s):
                    break
                self._elapsed_s += self.options.collect_interval_s
        finally:
            if self.uploader.buffered:
                self.uploader.seal()
        return None
