"""`AgentRunner`: one node agent's life — register, then heartbeat until told to stop, and
with telemetry on, collect and upload telemetry beside the heartbeats.

The runner must outlive the server: an unreachable server, a timeout or a 5xx is retried
with capped exponential backoff and jitter, and nothing short of a stop ends the loop —
except a 401, which no retry can cure (the join token is spent or expired, or the node's
credential was revoked): then the runner logs what the operator must do and returns. A 401
on a telemetry upload ends the run the same way.

Telemetry (`telemetry=TelemetryOptions(...)`, for a backend with `collect()`) runs as a
second asyncio task once the node has registered: `telemetry_loop.TelemetryLoop`, with its
spool in `<state_dir>/spool`. A backend without `collect()` runs heartbeats only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import httpx

from gpufleet import __version__
from gpufleet.wire.agent import HeartbeatReply, RegistrationReply

from .backend import GpuBackend, SourceUnavailable, TelemetrySource
from .backoff import Backoff
from .client import AgentClient, AgentError, ApiError, ServerUnavailable, TokenRejected
from .session import AgentSession, NotJoined
from .spool import Spool
from .state import AgentState
from .telemetry_loop import SnapshotListener, TelemetryLoop, TelemetryOptions
from .telemetry_uploader import BatchSpool, TelemetryUploader, UploadOutcome

log = logging.getLogger(__name__)

Wait = Callable[[asyncio.Event, float], Awaitable[bool]]
SPOOL_DIR = "spool"


class StopReason(StrEnum):
    STOPPED = "stopped"  # the stop event was set
    UNAUTHORIZED = "unauthorized"  # 401: needs an operator
    NOT_JOINED = "not_joined"  # no credential and no join token


async def wait_or_stop(stop_event: asyncio.Event, delay_s: float) -> bool:
    """Sleep `delay_s`, waking early when stopped; True when the stop event is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop_event.wait(), timeout=max(delay_s, 0.0))
    return stop_event.is_set()


@dataclass(frozen=True)
class OnceResult:
    """What `run_once` did: `ok` when everything collected and spooled was acknowledged."""

    ok: bool
    message: str
    reason: StopReason | None = None  # set when the node cannot register at all


class AgentRunner:
    """One agent, of the server at `servers` (one URL, or several replicas' in order of
    preference: `AgentClient`). `http`, `wait`, `telemetry_wait` and `spool` are
    injectable for tests; an `http` client passed in is the caller's to close, one created
    here is closed by `aclose()`. `on_snapshot` sees every collected snapshot (the agent's
    /metrics)."""

    def __init__(self, servers: str | Sequence[str], backend: GpuBackend,
                 state_dir: str | Path,
                 join_token: str | None = None, *, http: httpx.AsyncClient | None = None,
                 backoff: Backoff | None = None, wait: Wait = wait_or_stop,
                 agent_version: str | None = __version__,
                 telemetry: TelemetryOptions | None = None, telemetry_wait: Wait = wait_or_stop,
                 spool: BatchSpool | None = None, on_snapshot: SnapshotListener | None = None):
        self.state = AgentState(state_dir)
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0))
        self.backoff = backoff or Backoff()
        self._wait = wait
        client = AgentClient(servers, self._http)
        self.session = AgentSession(
            client, backend, credential=self.state.read_credential(),
            join_token=join_token, on_credential=self._store_credential,
            agent_version=agent_version)
        self._registered = asyncio.Event()
        self.telemetry: TelemetryLoop | None = None
        if telemetry is not None and isinstance(backend, TelemetrySource):
            spool = spool if spool is not None else Spool(
                self.state.state_dir / SPOOL_DIR, telemetry.spool_max_bytes)
            uploader = TelemetryUploader(client, spool, ticks_per_batch=telemetry.ticks_per_batch,
                                         max_batch_bytes=telemetry.max_batch_bytes,
                                         node_name=lambda: self.session.node,
                                         on_inventory_stale=self.session.register_again,
                                         registrations=lambda: self.session.registrations)
            self.telemetry = TelemetryLoop(
                backend, uploader, lambda: self.session.credential, telemetry,
                wait=telemetry_wait, on_snapshot=on_snapshot)

    async def __aenter__(self) -> AgentRunner:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def _register_again_once(self) -> bool:
        """For `run_once`: the server refused a batch naming GPUs the registration lacks (a
        MIG layout changed since); register once more so the batch can go. Raises
        TokenRejected; other failures are logged and leave the batch in the spool."""
        try:
            await self.register()
        except TokenRejected:
            raise
        except (AgentError, SourceUnavailable) as exc:
            log.warning("registering again failed: %s", exc)
            return False
        return True

    def _store_credential(self, credential: str) -> None:
        try:
            self.state.save_credential(credential)
        except OSError as exc:
            log.error("could not store the node credential in %s (%s); the agent keeps "
                      "running, but after a restart it will need a new join token",
                      self.state.credential_path, exc)
        else:
            log.info("stored the node credential in %s", self.state.credential_path)

    async def register(self) -> RegistrationReply:
        """One registration attempt, no retry; errors as `AgentSession.register`."""
        reply = await self.session.register()
        self._registered.set()
        log.info("registered as node %s in %s (%s, %d GPUs); heartbeat every %.0f s",
                 reply.node, reply.environment, reply.node_status, reply.gpus_registered,
                 reply.heartbeat_interval_s)
        return reply

    async def heartbeat_once(self) -> HeartbeatReply:
        return await self.session.heartbeat()

    def _token_rejected(self, exc: TokenRejected, with_credential: bool) -> StopReason:
        if with_credential:
            log.error("the server rejected this node's credential (%s: %s). The node was "
                      "probably removed or its token revoked. To join again, delete %s and "
                      "start the agent with a new join token.", exc.code, exc.message,
                      self.state.credential_path)
        else:
            log.error("the server rejected the join token (%s: %s): it is unknown, expired "
                      "or already used. Ask an operator for a new join token.",
                      exc.code, exc.message)
        return StopReason.UNAUTHORIZED

    async def _step(self) -> float | StopReason:
        """One registration or heartbeat; the delay before the next step, or why to stop."""
        with_credential = self.session.credential is not None
        try:
            if self.session.registered:
                await self.heartbeat_once()
            else:
                await self.register()
        except NotJoined as exc:
            log.error("cannot register: %s (looked in %s). Start the agent with a join token.",
                      exc, self.state.credential_path)
            return StopReason.NOT_JOINED
        except TokenRejected as exc:
            return self._token_rejected(exc, with_credential)
        except ApiError as exc:
            log.error("the server refused the %s: %s", "heartbeat" if self.session.registered
                      else "registration", exc)
            self.session.register_again()  # idempotent, and may heal it
        except ServerUnavailable as exc:
            log.warning("server unavailable: %s", exc)
        except SourceUnavailable as exc:  # discovery could not read the GPUs this time
            log.warning("cannot read the node's inventory: %s", exc)
        except Exception:  # never crash: a bug in one step must not end the agent
            log.exception("unexpected error in the agent loop")
        else:
            self.backoff.reset()
            return self.session.interval_s or 30.0
        delay_s = self.backoff.next_delay_s()
        log.info("retrying in %.1f s", delay_s)
        return delay_s

    async def run(self, stop_event: asyncio.Event) -> StopReason:
        """Register, then heartbeat at the server's interval until `stop_event` is set; the
        telemetry loop beside the heartbeats once registered, when telemetry is on."""
        halt = asyncio.Event()  # the stop, or a credential the telemetry upload saw rejected
        relay = asyncio.create_task(_relay(stop_event, halt))
        telemetry = asyncio.create_task(self._telemetry(halt)) if self.telemetry else None
        try:
            reason = await self._heartbeats(halt)
        finally:
            halt.set()
            relay.cancel()
            rejected = await telemetry if telemetry is not None else None
        if reason is StopReason.STOPPED and rejected is not None:
            return self._token_rejected(rejected, with_credential=True)
        if reason is StopReason.STOPPED:
            log.info("agent stopped")
        return reason

    async def _heartbeats(self, halt: asyncio.Event) -> StopReason:
        while not halt.is_set():
            outcome = await self._step()
            if isinstance(outcome, StopReason):
                return outcome
            if await self._wait(halt, outcome):
                break
        return StopReason.STOPPED

    async def _telemetry(self, halt: asyncio.Event) -> TokenRejected | None:
        """The telemetry loop from the first registration until halted; a rejected
        credential (401) halts the agent."""
        assert self.telemetry is not None
        if not await _first_of(self._registered, halt):
            return None
        try:
            rejected = await self.telemetry.run(halt)
        except Exception:  # a bug here must not take the heartbeats down with it
            log.exception("the telemetry loop failed; heartbeats go on without telemetry")
            return None
        if rejected is not None:
            halt.set()
        return rejected

    async def run_once(self) -> OnceResult:
        """Register, collect one tick, upload it with whatever the spool holds; for cron
        jobs and checks. `ok` only when every batch was acknowledged."""
        if self.telemetry is None:
            raise ValueError("run_once needs telemetry options and a backend with collect()")
        with_credential = self.session.credential is not None
        try:
            await self.register()
        except NotJoined as exc:
            return OnceResult(False, f"cannot register: {exc}", StopReason.NOT_JOINED)
        except TokenRejected as exc:
            reason = self._token_rejected(exc, with_credential)
            return OnceResult(False, f"the server rejected the token ({exc.code})", reason)
        except (AgentError, SourceUnavailable) as exc:
            return OnceResult(False, f"registration failed: {exc}")
        loop = self.telemetry
        snapshot = await loop.collect()  # None: the collection failed (logged)
        await loop.seal()
        pending_before = loop.uploader.pending()
        try:
            outcome = await loop.uploader.upload(self.session.credential or "")
            if outcome is UploadOutcome.REGISTERING and await self._register_again_once():
                outcome = await loop.uploader.upload(self.session.credential or "")
        except TokenRejected as exc:
            reason = self._token_rejected(exc, with_credential=True)
            return OnceResult(False, "the server rejected this node's credential", reason)
        counters = loop.uploader.counters
        left = loop.uploader.pending()
        sent = f"{pending_before - left} of {pending_before} batch(es) acknowledged"
        if snapshot is None:
            return OnceResult(False, f"collection failed (see the log above); {sent}")
        if outcome is not UploadOutcome.DONE or left:
            return OnceResult(False, f"{sent}; {left} kept in the spool for the next run")
        refused = f", {counters.batches_refused} refused and dropped" \
            if counters.batches_refused else ""
        return OnceResult(not counters.batches_refused,
                          f"collected {len(snapshot.units)} unit(s); {sent}{refused}")


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _first_of(wanted: asyncio.Event, halt: asyncio.Event) -> bool:
    """Wait until `wanted` or `halt` is set; True when `wanted` came first."""
    waiters = {asyncio.create_task(wanted.wait()), asyncio.create_task(halt.wait())}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return not halt.is_set()
