"""`gpufleet gpu health | clear | retire | quarantine | unquarantine | approve-move`: one GPU's
health and the operator's decisions on it."""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands import losing_units
from gpufleet.cli.commands.common import JsonFlag, Reason, body
from gpufleet.cli.output import Group, done, emit, fields, table, when
from gpufleet.domain.inventory import GpuHealth

app = typer.Typer(help="One GPU: health and moves between nodes.", no_args_is_help=True)

Uuid = Annotated[str, typer.Argument(help="The GPU's NVML UUID.")]
RequiredReason = Annotated[str, typer.Option(
    "--reason", help="Why; kept with the GPU's health and in the audit log.")]
MigOption = Annotated[str | None, typer.Option(
    "--mig", metavar="MIG_UUID",
    help="Clear this MIG instance of the GPU instead of the GPU itself.")]


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


@app.command("health")
def health(uuid: Uuid, as_json: JsonFlag = False) -> None:
    """The GPU's health, the rule and evidence that put it there, its history, and its MIG
    instances' own states."""
    with connect() as api:
        view = api.get(api_path("gpus", uuid, "health"))
    emit(view, as_json, _health_view)


@app.command("clear")
def clear(uuid: Uuid, reason: RequiredReason, mig: MigOption = None) -> None:
    """Return a suspect or quarantined GPU, or one MIG instance of it (--mig), to healthy
    (operators); recorded as yours."""
    with connect() as api:
        view = api.post(api_path("gpus", uuid, "clear"),
                        body(reason=reason, mig_instance=mig))
    if mig is not None:
        done(f"MIG instance {mig} of GPU {view['gpu']} on node {view['node']} is healthy "
             "again")
        return
    done(f"GPU {view['gpu']} on node {view['node']} is healthy again")


@app.command("retire")
def retire(uuid: Uuid, reason: RequiredReason) -> None:
    """Retire a quarantined GPU for good (operators): placement never uses it again."""
    with connect() as api:
        view = api.post(api_path("gpus", uuid, "retire"), body(reason=reason))
    done(f"GPU {view['gpu']} on node {view['node']} is retired")


def _health_view(view: dict):
    evidence = view.get("evidence") or {}
    head = fields({"GPU": view["gpu"], "node": view["node"],
                   "environment": view["environment"], "health": view["health"],
                   "since": when(view.get("since")), "rule": view.get("rule"),
                   "evidence": evidence.get("line"), "reason": view.get("health_reason"),
                   "last cleared by": view.get("cleared_by")})
    rows = [(when(t["at"]), f"{t['from_state']} → {t['to_state']}", t.get("rule"),
             (t.get("evidence") or {}).get("line") or t.get("reason"), t["actor"])
            for t in view["history"]]
    parts = [head, table(("at", "change", "rule", "why", "by"), rows, title="history")]
    instances = view.get("mig_instances") or []
    if instances:
        parts.append(table(
            ("MIG instance", "profile", "start", "health", "in service", "since", "why"),
            [(m["mig_uuid"], m["profile"], m["placement_start"], m["health"],
              "yes" if m["in_service"] else "no", when(m.get("since")),
              (m.get("evidence") or {}).get("line") or m.get("health_reason"))
             for m in instances], title="MIG instances"))
    return Group(*parts)
