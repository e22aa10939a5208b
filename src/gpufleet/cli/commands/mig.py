"""`gpufleet mig export`: the fleet's desired MIG layouts as an NVIDIA mig-parted config."""

import json
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, query
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import note, plural

app = typer.Typer(help="MIG layouts: export them for NVIDIA mig-parted.", no_args_is_help=True)


def _write(out: Path, text: str) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None


@app.command("export")
def export(
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
    environment: Annotated[str | None, typer.Option(
        "--environment", "-e", help="Only nodes of this environment.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", dir_okay=False, help="Write to this file instead of stdout.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Each node's desired MIG layout (its pending plan, else what it reports) as a
    mig-parted config, one named config per distinct node layout. It pins no placements:
    mig-parted lets the driver choose where instances start (docs/mig.md)."""
    with connect() as api:
        exported = api.get(api_path("mig", "configs"),
                           query(node=node, environment=environment, format="json"))
    text = json.dumps(exported, indent=2) + "\n" if as_json else exported["config_yaml"]
    for message in exported["notes"]:
        note(f"note: {message}")
    if out is None:
        typer.echo(text, nl=False)
        return
    _write(out, text)
    configs = exported["mig_parted"].get("mig-configs", {})
    note(f"wrote {out}: {plural(len(configs), 'config')} for "
         f"{plural(len(exported['nodes']), 'node')}; it pins no MIG placements (see its "
         "header)")
