"""`gpufleet node ls | show | cordon | uncordon | retire`."""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands import losing_units
from gpufleet.cli.commands.common import (
    AllPages,
    Environments,
    Healths,
    JsonFlag,
    Labels,
    Limit,
    Models,
    Reason,
    body,
    query,
    show_listing,
)
from gpufleet.cli.output import done, emit
from gpufleet.cli.views import node_detail, nodes_table
from gpufleet.domain.inventory import NodeStatus

app = typer.Typer(help="Nodes: list, inspect, cordon, uncordon, retire.", no_args_is_help=True)

NodeName = Annotated[str, typer.Argument(help="The node's name (its hostname).")]


@app.command("ls")
def list_nodes(
    environment: Environments = None,
    status: Annotated[list[NodeStatus] | None, typer.Option(
        "--status", "-s", help="Only this node status; repeat for several.")] = None,
    model: Models = None,
    health: Healths = None,
    label: Labels = None,
    sort: Annotated[str, typer.Option(
        "--sort", help="name, environment, status, cpu_cores or memory; "
                       "prefix - for descending.")] = "name",
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List nodes; --model and --health match nodes with at least one such GPU."""
    params = query(environment=environment, status=status, model=model, health=health,
                   label=label, sort=sort, limit=limit)
    show_listing(api_path("nodes"), params, all_pages=all_pages, as_json=as_json,
                 render=nodes_table, what="nodes")


@app.command("show")
def show(name: NodeName, as_json: JsonFlag = False) -> None:
    """One node and its GPUs."""
    with connect() as api:
        node = api.get(api_path("nodes", name))
    emit(node, as_json, node_detail)


def _change(name: str, action: str, reason: str | None) -> dict:
    with connect() as api:
        return api.post(api_path("nodes", name, action), body(reason=reason))


@app.command("cordon")
def cordon(name: NodeName, reason: Reason = None) -> None:
    """Stop new placements on a node; work already running stays."""
    node = _change(name, "cordon", reason)
    done(f"cordoned node {node['name']} (status {node['status']})")


@app.command("uncordon")
def uncordon(name: NodeName, reason: Reason = None) -> None:
    """Allow new placements on a node again."""
    node = _change(name, "uncordon", reason)
    done(f"uncordoned node {node['name']} (status {node['status']})")


@app.command("retire")
def retire(name: NodeName, reason: Reason = None, yes: losing_units.Yes = False) -> None:
    """Take a node out of the fleet for good: its credential is revoked, and the
    allocations holding its GPUs lose those units (listed first)."""
    with connect() as api:
        affected = losing_units.holders(api, node=name)
        losing_units.confirm(
            f"Retire node {name}? Its agent credential is revoked and its GPUs may move to "
            "other nodes; it never comes back (its machine may join again only under a new "
            "machine id)", affected, yes, node=name)
        node = api.post(api_path("nodes", name, "retire"), body(reason=reason))
    done(f"retired node {node['name']} (status {node['status']})")
