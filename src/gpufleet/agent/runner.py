"""`AgentRunner`: one node agent's life — register, then heartbeat until told to stop.

The runner must outlive the server: an unreachable server, a timeout or a 5xx is retried
with capped exponential backoff and jitter, and nothing short of a stop ends the loop —
except a 401, which no retry can cure (the join token is spent or expired, or the node's
credential was revoked): then the runner logs what the operator must do and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path

import httpx

from gpufleet import __version__
from gpufleet.wire.agent import HeartbeatReply, RegistrationReply

from .backend import GpuBackend
from .backoff import Backoff
from .client import AgentClient, ApiError, ServerUnavailable, TokenRejected
from .session import AgentSession, NotJoined
from .state import AgentState

log = logging.getLogger(__name__)

Wait = Callable[[asyncio.Event, float], Awaitable[bool]]


class StopReason(StrEnum):
    STOPPED = "stopped"  # the stop event was set
    UNAUTHORIZED = "unauthorized"  # 401: needs an operator
    NOT_JOINED = "not_joined"  # no credential and no join token


async def wait_or_stop(stop_event: asyncio.Event, delay_s: float) -> bool:
    """Sleep `delay_s`, waking early when stopped; True when the stop event is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop_event.wait(), timeout=max(delay_s, 0.0))
    return stop_event.is_set()


class AgentRunner:
    """One agent. `http` and `wait` are injectable for tests; an `http` client passed in
    is the caller's to close, one created here is closed by `aclose()`."""

    def __init__(self, server_url: str, backend: GpuBackend, state_dir: str | Path,
                 join_token: str | None = None, *, http: httpx.AsyncClient | None = None,
                 backoff: Backoff | None = None, wait: Wait = wait_or_stop,
                 agent_version: str | None = __version__):
        self.state = AgentState(state_dir)
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0))
        self.backoff = backoff or Backoff()
        self._wait = wait
        self.session = AgentSession(
            AgentClient(server_url, self._http), backend, credential=self.state.read_credential(),
            join_token=join_token, on_credential=self._store_credential,
            agent_version=agent_version)

    async def __aenter__(self) -> AgentRunner:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

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
            self.session.registered = False  # re-registering is idempotent and may heal it
        except ServerUnavailable as exc:
            log.warning("server unavailable: %s", exc)
        except Exception:  # never crash: a bug in one step must not end the agent
            log.exception("unexpected error in the agent loop")
        else:
            self.backoff.reset()
            return self.session.interval_s or 30.0
        delay_s = self.backoff.next_delay_s()
        log.info("retrying in %.1f s", delay_s)
        return delay_s

    async def run(self, stop_event: asyncio.Event) -> StopReason:
        """Register, then heartbeat at the server's interval until `stop_event` is set."""
        while not stop_event.is_set():
            outcome = await self._step()
            if isinstance(outcome, StopReason):
                return outcome
            if await self._wait(stop_event, outcome):
                break
        log.info("agent stopped")
        return StopReason.STOPPED
