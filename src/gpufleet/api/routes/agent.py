"""The agent protocol endpoints (see `gpufleet.wire.agent`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import principal, raw_token, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.agent import Heartbeat, HeartbeatReply, NodeRegistration, RegistrationReply

router = APIRouter(prefix="/api/v1/agent", tags=["agent"])


@router.post("/register", response_model=RegistrationReply)
def register(body: NodeRegistration, token: str = Depends(raw_token),
             gf: Gpufleet = Depends(services)):
    """Register (or re-register) a node with a join token or the node's credential.

    Authenticated by the token itself: a single-use join token admits a new node and the
    reply carries the node's credential; the credential re-registers it idempotently.
    """
    return gf.register_node(token, body)


@router.post("/heartbeat", response_model=HeartbeatReply)
def heartbeat(body: Heartbeat, p: Principal = Depends(principal),
              gf: Gpufleet = Depends(services)):
    """Keep the node reachable; the reply carries its desired state and version."""
    return gf.heartbeat(p, body)
