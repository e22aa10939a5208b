"""One node's side of the agent protocol: credential, heartbeat interval, desired state.

Kept apart from the loop that drives it (`runner.py` for one agent, the simulator's fleet
runner for thousands on one event loop), so both speak the protocol the same way.

Desired state is applied when its version changes, and the version reported back
(`applied_desired_state_version`) is the last one the backend accepted. A state the
backend refuses is logged once and not retried until the server sends a new version —
retrying the same invalid plan at every heartbeat would only fill the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpufleet import __version__
from gpufleet.wire.agent import (
    DesiredState,
    Heartbeat,
    HeartbeatReply,
    NodeRegistration,
    RegistrationReply,
)

from .backend import GpuBackend
from .client import AgentClient, AgentError, ApiError

log = logging.getLogger(__name__)


class NotJoined(AgentError):
    """Neither a stored node credential nor a join token: the node cannot register."""


class AgentSession:
    def __init__(self, client: AgentClient, backend: GpuBackend, *, credential: str | None = None,
                 join_token: str | None = None,
                 on_credential: Callable[[str], None] | None = None,
                 agent_version: str | None = __version__):
        self.client = client
        self.backend = backend
        self.credential = credential
        self.join_token = join_token
        self.on_credential = on_credential
        self.agent_version = agent_version
        self.registered = False
        self.registrations = 0  # successful registrations by this process
        self.node: str | None = None  # the server's name for this node
        self.interval_s: float | None = None
        self.applied_version: int | None = None
        self._refused_version: int | None = None

    def _registration(self) -> NodeRegistration:
        registration = self.backend.discover()
        if registration.agent_version is None and self.agent_version is not None:
            registration = registration.model_copy(update={"agent_version": self.agent_version})
        return registration

    async def register(self) -> RegistrationReply:
        """Register with the stored credential, else the join token; keep a new credential.

        Raises NotJoined, or the client's errors (Unauthorized, ApiError, ServerUnavailable).
        """
        bearer = self.credential or self.join_token
        if bearer is None:
            raise NotJoined("no node credential is stored and no join token was given")
        reply = await self.client.register(bearer, self._registration())
        if reply.credential:
            self.credential = reply.credential
            self.join_token = None  # single-use: it was spent on this registration
            if self.on_credential is not None:
                self.on_credential(reply.credential)
        elif self.credential is None:
            raise ApiError(200, "no_credential", "the server accepted the join token but "
                           "issued no node credential")
        self.registered = True
        self.registrations += 1
        self.node = reply.node
        self.interval_s = reply.heartbeat_interval_s
        self.converge(reply.desired_state)
        return reply

    def register_again(self, why: str | None = None) -> None:
        """Register (idempotent) at the next step instead of heart-beating, so the server
        learns the inventory as it is now; `why` is logged when given."""
        if why is not None:
            log.warning("node %s: %s; registering again", self.node, why)
        self.registered = False

    async def heartbeat(self) -> HeartbeatReply:
        if self.credential is None:
            raise NotJoined("the node has not registered yet")
        beat = Heartbeat(applied_desired_state_version=self.applied_version,
                         agent_version=self.agent_version)
        reply = await self.client.heartbeat(self.credential, beat)
        self.interval_s = reply.heartbeat_interval_s
        self.converge(reply.desired_state)
        return reply

    def converge(self, state: DesiredState) -> None:
        """Hand a new desired-state version to the backend; never raises."""
        if state.version in (self.applied_version, self._refused_version):
            return
        before = self._mig_layouts()
        try:
            self.backend.apply_desired_state(state)
        except Exception as exc:  # a backend failure must not stop the heartbeats
            self._refused_version = state.version
            log.error("node %s: desired state version %d not applied: %s",
                      self.node, state.version, exc)
            return
        self.applied_version = state.version
        log.debug("node %s: applied desired state version %d", self.node, state.version)
        if self._mig_layouts() != before:
            self.register_again()  # new MIG instances have new MIG UUIDs to tell

    def _mig_layouts(self) -> dict[str, frozenset]:
        return {gpu.uuid: frozenset(m.key for m in gpu.mig_instances)
                for gpu in self.backend.discover().gpus}
