"""`gpufleet fleet summary | ls | show`: the GPUs, by count and one by one."""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import (
    AllPages,
    Environments,
    Healths,
    JsonFlag,
    Labels,
    Limit,
    Models,
    query,
    show_listing,
)
from gpufleet.cli.output import emit
from gpufleet.cli.views import gpu_detail, gpus_table, summary_table
from gpufleet.domain.inventory import GpuStatus, SharingMode

app = typer.Typer(help="The GPU fleet: summary, listing and details.", no_args_is_help=True)


@app.command("summary")
def summary(as_json: JsonFlag = False) -> None:
    """GPUs by environment × model, one column per status."""
    with connect() as api:
        data = api.get(api_path("fleet", "summary"))
    emit(data, as_json, summary_table)


def _allocation_labels(labels: list[str] | None, allocation: str | None,
                       project: str | None) -> list[str]:
    """`--allocation` / `--project` are the labels the lifecycle stamps on granted units."""
    selectors = list(labels or [])
    if allocation:
        selectors.append(f"allocation={allocation}")
    if project:
        selectors.append(f"project={project}")
    return selectors


@app.command("ls")
def list_gpus(
    environment: Environments = None,
    model: Models = None,
    status: Annotated[list[GpuStatus] | None, typer.Option(
        "--status", "-s", help="Only this status; repeat for several.")] = None,
    health: Healths = None,
    sharing_mode: Annotated[list[SharingMode] | None, typer.Option(
        "--sharing-mode", help="Only this sharing mode; repeat for several.")] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only GPUs of this node.")] = None,
    label: Labels = None,
    node_label: Annotated[list[str] | None, typer.Option(
        "--node-label", help="Only on nodes with label key=value; repeatable.")] = None,
    allocation: Annotated[str | None, typer.Option(
        "--allocation", help="Only units of this allocation (label allocation=X).")] = None,
    project: Annotated[str | None, typer.Option(
        "--project", help="Only units held by this project (label project=X).")] = None,
    sort: Annotated[str, typer.Option(
        "--sort", help="node, uuid, environment, model, status, health or memory; "
                       "prefix - for descending.")] = "node",
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List GPUs matching every filter given."""
    params = query(environment=environment, model=model, status=status, health=health,
                   sharing_mode=sharing_mode, node=node,
                   label=_allocation_labels(label, allocation, project),
                   node_label=node_label, sort=sort, limit=limit)
    show_listing(api_path("gpus"), params, all_pages=all_pages, as_json=as_json,
                 render=gpus_table, what="GPUs")


@app.command("show")
def show(uuid: Annotated[str, typer.Argument(help="The GPU's NVML UUID.")],
         as_json: JsonFlag = False) -> None:
    """One GPU in detail, with its MIG instances and NVLink peers."""
    with connect() as api:
        gpu = api.get(api_path("gpus", uuid))
    emit(gpu, as_json, gpu_detail)
