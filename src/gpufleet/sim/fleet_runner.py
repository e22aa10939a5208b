"""Run a whole simulated fleet of agents in one process, on one event loop.

Thousands of agents share one `httpx.AsyncClient` whose connection pool, and a semaphore
of the same size, bound the requests in flight (`concurrency`), so the load on the server
is what the caller chose, not what the fleet size implies. The steps are those an operator
would take: create the environments (409: already there), mint join tokens for nodes
without a stored credential, register every node, then keep every agent heart-beating at
the server's interval, staggered so the fleet does not beat in step. Each agent speaks the
protocol through the same `AgentSession` as a real agent.

With `telemetry` (`FleetTelemetry`), each agent also collects a snapshot from its
`SimBackend` every `interval_s` and uploads it through the real agent's
`TelemetryUploader`, with an in-memory spool (a simulated node's telemetry is not worth a
file and an fsync per batch). Agents start at random offsets within one interval so the
server sees a steady stream, and uploads share the same bounded connection pool as the
heartbeats. The defaults suit the demo on a 2-core machine: a 1,700-GPU fleet uploads about
4 batches a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from gpufleet.agent.backoff import Backoff
from gpufleet.agent.client import (
    AgentClient,
    ApiError,
    ServerUnavailable,
    TokenRejected,
    Unauthorized,
)
from gpufleet.agent.memory_spool import MemorySpool
from gpufleet.agent.session import AgentSession
from gpufleet.agent.telemetry_loop import collect_once
from gpufleet.agent.telemetry_uploader import TelemetryCounters, TelemetryUploader, UploadOutcome
from gpufleet.clock import Clock

from .backend import SimBackend
from .credentials import FleetCredentials
from .faults import FaultKind
from .fleet_spec import FleetSpec
from .nodes import iter_nodes
from .operator_api import OperatorApi

log = logging.getLogger(__name__)

SAVE_EVERY_REGISTRATIONS = 200
RUNNING_PROGRESS_EVERY_S = 1.0  # heartbeats are many; report their counts at this pace
STRIKE_RETRY_S = 15.0  # how often a scheduled fault looks again for a held GPU


@dataclasses.dataclass
class FleetProgress:
    """Where the fleet stands; `on_progress` gets a copy after every change worth showing."""

    phase: str  # environments, join_tokens, registering, running, stopped
    nodes_total: int
    gpus_total: int
    nodes_registered: int = 0
    gpus_registered: int = 0
    nodes_failed: int = 0
    heartbeats_sent: int = 0
    heartbeats_failed: int = 0
    telemetry_batches_acknowledged: int = 0
    telemetry_batches_failed: int = 0  # refused, or not sent because the server was unavailable


@dataclasses.dataclass(frozen=True)
class FleetTelemetry:
    """How the simulated agents report telemetry: a snapshot every `interval_s` per node,
    uploaded every `ticks_per_batch` snapshots. `clock` replaces the backends' system clock
    (tests, or a simulation faster than real time)."""

    interval_s: float = 60.0
    ticks_per_batch: int = 1
    spool_max_bytes: int = 2 * 1024**2  # per agent: a few minutes of an outage
    clock: Clock | None = None
    # A demo's fault on a schedule: this long after the fleet runs, the first GPU held whole
    # by an allocation gets `strike_kind` (its XID at once), so the health loop has
    # something to quarantine and an owner to tell within minutes (docs/operations.md).
    strike_after_s: float | None = None
    strike_kind: FaultKind = FaultKind.FALLEN_OFF_BUS


ProgressCallback = Callable[[FleetProgress], None]
Sleep = Callable[[float], Awaitable[None]]


@dataclasses.dataclass
class _Agent:
    backend: SimBackend
    session: AgentSession
    backoff: Backoff
    uploader: TelemetryUploader | None = None

    @property
    def machine_id(self) -> str:
        return self.backend.node.registration.machine_id


class _FleetRun:
    def __init__(self, server_url: str, operator_token: str, spec: FleetSpec,
                 state_dir: Path, concurrency: int, on_progress: ProgressCallback | None,
                 http: httpx.AsyncClient, sleep: Sleep, rng: random.Random,
                 telemetry: FleetTelemetry | None = None,
                 monotonic_s: Callable[[], float] = time.monotonic):
        self.spec = spec
        self.monotonic_s = monotonic_s
        self.credentials = FleetCredentials(state_dir)
        self.operator = OperatorApi(server_url, operator_token, http, sleep, rng)
        self.concurrency = concurrency
        self.limit = asyncio.Semaphore(concurrency)
        self.on_progress = on_progress
        self.sleep = sleep
        self.rng = rng
        self.telemetry = telemetry
        self.telemetry_counters = TelemetryCounters()  # the whole fleet's
        client = AgentClient(server_url, http)
        clock = telemetry.clock if telemetry else None
        self.agents = [self._agent(client, SimBackend(node, clock=clock))
                       for node in iter_nodes(spec)]
        self.progress = FleetProgress("environments", len(self.agents), spec.gpu_count)
        self._reported_at_s = float("-inf")

    def _agent(self, client: AgentClient, backend: SimBackend) -> _Agent:
        registration = backend.node.registration
        session = AgentSession(client, backend,
                               credential=self.credentials.get(registration.machine_id))
        session.on_credential = lambda credential: self.credentials.set(
            registration.machine_id, registration.hostname, credential)
        uploader = None
        if self.telemetry is not None:
            uploader = TelemetryUploader(
                client, MemorySpool(self.telemetry.spool_max_bytes),
                ticks_per_batch=self.telemetry.ticks_per_batch,
                counters=self.telemetry_counters, node_name=lambda: session.node,
                on_inventory_stale=session.register_again,  # the heartbeat loop registers
                registrations=lambda: session.registrations)
        return _Agent(backend, session, Backoff(rng=self.rng), uploader)

    def report(self, phase: str | None = None) -> None:
        if phase is not None:
            self.progress.phase = phase
        if self.on_progress is not None:
            self.on_progress(dataclasses.replace(self.progress))

    def report_now_and_then(self) -> None:
        now_s = asyncio.get_running_loop().time()
        if now_s - self._reported_at_s >= RUNNING_PROGRESS_EVERY_S:
            self._reported_at_s = now_s
            self.report()

    async def run(self) -> None:
        self.report("environments")
        await self.operator.ensure_environments(self.spec.environments)
        await self._leave_out_retired()
        rejected = await self._join(
            self.agents, to_mint=[a for a in self.agents if a.session.credential is None])
        if rejected:
            log.warning("%d stored node credentials were rejected; joining those nodes "
                        "again with new join tokens", len(rejected))
            for agent in rejected:
                agent.session.credential = None
                self.credentials.forget(agent.machine_id)
            await self._join(rejected, to_mint=rejected)
        self.credentials.save()
        registered = [a for a in self.agents if a.session.registered]
        self.report("running")
        async with asyncio.TaskGroup() as group:
            if self.telemetry is not None and self.telemetry.strike_after_s is not None:
                group.create_task(self._strike_later(self.telemetry.strike_after_s,
                                                     self.telemetry.strike_kind))
            for agent in registered:
                group.create_task(self._heartbeat_forever(agent))
                if agent.uploader is not None:
                    group.create_task(self._telemetry_forever(agent))

    async def _strike_later(self, after_s: float, kind: FaultKind) -> None:
        """After `after_s`, strike the first GPU an allocation holds whole (waiting for one
        to be held): its fault starts now, on a schedule, not hours in."""
        await self.sleep(after_s)
        while True:
            for agent in self.agents:
                held = [b for b in agent.backend.bindings if b.mig_profile_id is None
                        and (b.milli is None or b.milli >= 1000)]
                if held:
                    backend = agent.backend
                    backend.telemetry.strike(held[0].gpu_uuid, [kind], backend.clock.now())
                    log.warning("demo fault: GPU %s on %s (held by %s) now has %s",
                                held[0].gpu_uuid, backend.node.hostname, held[0].allocation,
                                kind.value)
                    return
            await self.sleep(STRIKE_RETRY_S)

    async def _leave_out_retired(self) -> None:
        """An operator retired these nodes: their agents stay down (re-joining would undo
        the operator's decision), and the fleet's progress counts without them."""
        retired = await self.operator.retired_node_names()
        kept = [a for a in self.agents if a.backend.node.hostname not in retired]
        if len(kept) == len(self.agents):
            return
        log.info("%d nodes are retired; their agents stay down", len(self.agents) - len(kept))
        self.agents = kept
        self.progress.nodes_total = len(kept)
        self.progress.gpus_total = sum(a.backend.node.gpu_count for a in kept)

    async def _join(self, agents: list[_Agent], to_mint: list[_Agent]) -> list[_Agent]:
        """Mint join tokens for `to_mint`, then register `agents`; returns the agents whose
        stored credential the server rejected."""
        self.report("join_tokens")
        by_environment: dict[str, list[_Agent]] = {}
        for agent in to_mint:
            by_environment.setdefault(agent.backend.node.environment, []).append(agent)
        for environment, waiting in by_environment.items():
            tokens = await self.operator.mint_join_tokens(environment, len(waiting))
            for agent, token in zip(waiting, tokens, strict=True):
                agent.session.join_token = token
        self.report("registering")
        queue: asyncio.Queue[_Agent] = asyncio.Queue()
        for agent in agents:
            queue.put_nowait(agent)
        rejected: list[_Agent] = []
        async with asyncio.TaskGroup() as workers:
            for _ in range(min(self.concurrency, len(agents))):
                workers.create_task(self._register_worker(queue, rejected))
        return rejected

    async def _register_worker(self, queue: asyncio.Queue[_Agent], rejected: list[_Agent]) -> None:
        while not queue.empty():
            agent = queue.get_nowait()
            outcome = await self._register(agent)
            if outcome == "rejected_credential":
                rejected.append(agent)
            elif outcome == "failed":
                self.progress.nodes_failed += 1
            else:
                self.progress.nodes_registered += 1
                self.progress.gpus_registered += agent.backend.node.gpu_count
            if self.credentials.unsaved >= SAVE_EVERY_REGISTRATIONS:
                self.credentials.save()
            self.report()

    async def _register(self, agent: _Agent) -> str:
        """Register one agent, retrying while the server is unavailable."""
        hostname = agent.backend.node.hostname
        while True:
            with_credential = agent.session.credential is not None
            try:
                async with self.limit:
                    await agent.session.register()
                agent.backoff.reset()
                return "registered"
            except TokenRejected as exc:
                if with_credential:
                    return "rejected_credential"
                log.error("node %s: join token refused: %s", hostname, exc)
                return "failed"
            except ApiError as exc:
                log.error("node %s: registration refused: %s", hostname, exc)
                return "failed"
            except ServerUnavailable as exc:
                log.debug("node %s: %s", hostname, exc)
                await self.sleep(agent.backoff.next_delay_s())
            except Exception:  # one node's bug must not stop the fleet
                log.exception("node %s: unexpected error while registering", hostname)
                return "failed"

    async def _heartbeat_forever(self, agent: _Agent) -> None:
        await self.sleep(self.rng.uniform(0, agent.session.interval_s or 30.0))
        while True:
            delay_s = await self._heartbeat(agent)
            if delay_s is None:
                return
            await self.sleep(delay_s)

    async def _heartbeat(self, agent: _Agent) -> float | None:
        """One heartbeat (or re-registration); the delay before the next, None to stop."""
        hostname = agent.backend.node.hostname
        try:
            async with self.limit:
                if agent.session.registered:
                    await agent.session.heartbeat()
                else:
                    await agent.session.register()
        except TokenRejected as exc:
            log.error("node %s: credential rejected, agent stopped: %s", hostname, exc)
            self.progress.nodes_failed += 1
            self.progress.nodes_registered -= 1
            self.progress.gpus_registered -= agent.backend.node.gpu_count
            self.report()
            return None
        except ApiError as exc:
            log.warning("node %s: heartbeat refused, will register again: %s", hostname, exc)
            agent.session.register_again()
        except ServerUnavailable as exc:
            log.debug("node %s: %s", hostname, exc)
        except Exception:  # one agent's bug must not stop the fleet
            log.exception("node %s: unexpected error", hostname)
        else:
            self.progress.heartbeats_sent += 1
            self.report_now_and_then()
            agent.backoff.reset()
            return agent.session.interval_s or 30.0
        self.progress.heartbeats_failed += 1
        self.report_now_and_then()
        return agent.backoff.next_delay_s()

    async def _telemetry_forever(self, agent: _Agent) -> None:
        assert self.telemetry is not None and agent.uploader is not None
        uploader = agent.uploader
        period_s = self.telemetry.interval_s
        await tick_on_schedule(lambda: self._telemetry_tick(agent, uploader), period_s,
                               first_delay_s=self.rng.uniform(0, period_s),
                               backoff=Backoff(initial_s=period_s, max_s=10 * period_s,
                                               rng=self.rng),
                               sleep=self.sleep, monotonic_s=self.monotonic_s)

    async def _telemetry_tick(self, agent: _Agent, uploader: TelemetryUploader
                              ) -> UploadOutcome | None:
        """One collection and, when a batch is due, an upload: how the upload went
        (`DONE` when none was due), None to stop this agent's telemetry (its
        credential was revoked)."""
        assert self.telemetry is not None
        counters = self.telemetry_counters
        snapshot = uploader.collected(collect_once(agent.backend))
        if snapshot is None:
            return UploadOutcome.DONE
        if uploader.full:
            uploader.seal()
        if not uploader.pending() or agent.session.credential is None:
            return UploadOutcome.DONE
        try:
            async with self.limit:
                outcome = await uploader.upload(agent.session.credential)
        except Unauthorized as exc:
            log.error("node %s: telemetry credential rejected, telemetry stopped: %s",
                      agent.backend.node.hostname, exc)
            return None
        self.progress.telemetry_batches_acknowledged = counters.batches_acknowledged
        self.progress.telemetry_batches_failed = counters.batches_refused + \
            counters.uploads_failed
        self.report_now_and_then()
        return outcome


async def tick_on_schedule(tick: Callable[[], Awaitable[UploadOutcome | None]],
                           period_s: float, *, first_delay_s: float, backoff: Backoff,
                           sleep: Sleep, monotonic_s: Callable[[], float]) -> None:
    """Run `tick` on a fixed schedule until it returns None: the next tick is due one period
    after the previous one was due, however long collecting and uploading took (waiting for
    the fleet's shared connection limit takes seconds on a busy machine); after an
    `UNAVAILABLE` upload, after a backoff delay instead.

    Sleeping a whole period *after* each tick let the period drift past a minute, so whole
    minutes went unreported and the idle rule, which needs most minutes of its window
    known, judged nothing for half an hour."""
    due_s = monotonic_s() + first_delay_s
    while True:
        await sleep(max(0.0, due_s - monotonic_s()))
        outcome = await tick()
        if outcome is None:
            return
        if outcome is UploadOutcome.UNAVAILABLE:
            due_s = monotonic_s() + backoff.next_delay_s()
            continue
        backoff.reset()
        due_s = next_due_s(due_s, monotonic_s(), period_s)


def next_due_s(due_s: float, now_s: float, period_s: float) -> float:
    """The tick after the one due at `due_s`: one period later, or — when the tick ran past
    whole periods — the first slot of the schedule still ahead, so a late tick is not
    followed by a burst of catch-up ticks."""
    following_s = due_s + period_s
    if following_s > now_s:
        return following_s
    return following_s + math.ceil((now_s - following_s) / period_s + 1e-9) * period_s


async def run_simulated_fleet(server_url: str, operator_token: str, spec: FleetSpec,
                              state_dir: str | Path, stop_event: asyncio.Event,
                              concurrency: int = 32,
                              on_progress: ProgressCallback | None = None, *,
                              http: httpx.AsyncClient | None = None,
                              sleep: Sleep = asyncio.sleep,
                              rng: random.Random | None = None,
                              telemetry: FleetTelemetry | None = None,
                              monotonic_s: Callable[[], float] = time.monotonic
                              ) -> FleetProgress:
    """Register every node of `spec` and heartbeat them until `stop_event` is set; with
    `telemetry`, each agent also uploads its simulated telemetry.

    `operator_token` must be allowed to create environments and join tokens. Credentials
    are kept in `state_dir/credentials.json`. Returns the final progress. Raises
    `OperatorApiError` when the environments or join tokens cannot be created.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    own_http = http is None
    if http is None:
        http = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=concurrency,
                                max_keepalive_connections=concurrency),
            timeout=httpx.Timeout(30.0, connect=10.0, pool=None))
    try:
        fleet = _FleetRun(server_url, operator_token, spec, Path(state_dir), concurrency,
                          on_progress, http, sleep, rng or random.Random(spec.seed),
                          telemetry, monotonic_s)
        await _until_stopped(fleet, stop_event)
    finally:
        if own_http:
            await http.aclose()
    fleet.report("stopped")
    return fleet.progress


async def _until_stopped(fleet: _FleetRun, stop_event: asyncio.Event) -> None:
    """Run the fleet until it ends by itself (an error, or no agent left) or is stopped;
    the credentials are saved either way."""
    main = asyncio.create_task(fleet.run())
    stopper = asyncio.create_task(stop_event.wait())
    try:
        await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        main.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await main  # re-raises what ended the fleet early, if anything did
        fleet.credentials.save()
