"""`gpufleet environment create | ls`: where GPUs live."""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import AllPages, JsonFlag, Limit, body, query, show_listing
from gpufleet.cli.output import emit_done, table
from gpufleet.domain.inventory import EnvironmentKind, SharingMode

app = typer.Typer(help="Environments: where GPUs live (cloud regions, on-prem clusters).",
                  no_args_is_help=True)


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="e.g. azure-koreacentral, onprem-hpc.")],
    kind: Annotated[EnvironmentKind, typer.Option("--kind", help="cloud or onprem.")],
    provider: Annotated[str | None, typer.Option("--provider", help="e.g. azure.")] = None,
    region: Annotated[str | None, typer.Option("--region", help="e.g. koreacentral.")] = None,
    default_sharing_mode: Annotated[SharingMode | None, typer.Option(
        "--default-sharing-mode", help="How its GPUs are handed out unless a node says.")
    ] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create an environment; nodes join it with `gpufleet token join`."""
    with connect() as api:
        environment = api.post(api_path("environments"), body(
            name=name, kind=kind, provider=provider, region=region,
            default_sharing_mode=default_sharing_mode, description=description))
    emit_done(environment, as_json,
              f"created environment {environment['name']} ({environment['kind']}, default "
              f"sharing mode {environment['default_sharing_mode']})")


@app.command("ls")
def list_environments(limit: Limit = None, all_pages: AllPages = False,
                      as_json: JsonFlag = False) -> None:
    """List environments by name, with their node and GPU counts."""
    show_listing(api_path("environments"), query(limit=limit), all_pages=all_pages,
                 as_json=as_json, what="environments", render=lambda es: table(
                     ["name", "kind", "provider", "region", "default mode", "nodes", "GPUs",
                      "description"],
                     [[e["name"], e["kind"], e["provider"], e["region"],
                       e["default_sharing_mode"], e["nodes"], e["gpus"], e["description"]]
                      for e in es]))
