"""`gpufleet gpu quarantine | unquarantine | approve-move`: operator decisions on one GPU."""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands import losing_units
from gpufleet.cli.commands.common import Reason, body
from gpufleet.cli.output import done
from gpufleet.domain.inventory import GpuHealth

app = typer.Typer(help="One GPU: health and moves between nodes.", no_args_is_help=True)

Uuid = Annotated[str, typer.Argument(help="The GPU's NVML UUID.")]
RequiredReason = Annotated[str, typer.Option(
    "--reason", help="Why; kept with the GPU's health and in the audit log.")]


def _set_health(uuid: str, health: GpuHealth, reason: str) -> dict:
    with connect() as api:
        return api.post(api_path("gpus", uuid, "health"), body(health=health, reason=reason))


@app.command("quarantine")
def quarantine(uuid: Uuid, reason: RequiredReason, yes: losing_units.Yes = False) -> None:
    """Take a GPU out of placement until it is unquarantined. When allocations hold it,
    they lose it: they are listed and it asks first."""
    with connect() as api:
        affected = losing_units.holders(api, gpu=uuid)
        losing_units.confirm(f"Quarantine GPU {uuid}?", affected, yes,
                             only_if_affected=True, gpu=uuid)
    gpu = _set_health(uuid, GpuHealth.QUARANTINED, reason)
    done(f"quarantined GPU {gpu['uuid']} on node {gpu['node']} (status {gpu['status']})")


@app.command("unquarantine")
def unquarantine(uuid: Uuid, reason: RequiredReason) -> None:
    """Return a GPU to healthy, so placement may use it again."""
    gpu = _set_health(uuid, GpuHealth.HEALTHY, reason)
    done(f"GPU {gpu['uuid']} on node {gpu['node']} is healthy again (status {gpu['status']})")


@app.command("approve-move")
def approve_move(
    uuid: Uuid,
    to_node: Annotated[str, typer.Option("--to-node", help="The node that may take the GPU.")],
    reason: Reason = None,
) -> None:
    """Let another node claim this GPU at its next registration, although its node is live."""
    with connect() as api:
        approval = api.post(api_path("gpus", uuid, "move-approvals"),
                            body(to_node=to_node, reason=reason))
    done(f"approved: GPU {approval['gpu_uuid']} may move to node {approval['to_node_name']} "
         "at that node's next registration")
