"""The running server's own settings, for its administrator (`gpufleet config show --server`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.server_settings import ServerSetting

router = APIRouter(prefix="/api/v1")


@router.get("/server/settings", response_model=list[ServerSetting], tags=["server"])
def server_settings(p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Every setting the server runs with, where it came from (flag, environment, config
    file, default), as it started; secrets masked. Admins only."""
    return gf.server_settings(p)
