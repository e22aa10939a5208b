"""`gpufleet notifications ls`: what gpufleet told you (docs/operations.md, "Receivers")."""

import typer

from gpufleet.cli.client import api_path
from gpufleet.cli.commands.common import AllPages, JsonFlag, Limit, query, show_listing
from gpufleet.cli.output import table

app = typer.Typer(help="Your notifications: what gpufleet told you.", no_args_is_help=True)


@app.command("ls")
def list_notifications(limit: Limit = None, all_pages: AllPages = False,
                       as_json: JsonFlag = False) -> None:
    """Your own notifications, newest first (quarantines, reclamations, alerts on your
    units)."""
    show_listing(api_path("notifications"), query(limit=limit), all_pages=all_pages,
                 as_json=as_json, what="notifications", render=lambda ns: table(
                     ["at", "severity", "kind", "summary", "labels"],
                     [[n["at"], n["severity"], n["kind"], n["summary"],
                       " ".join(f"{k}={v}" for k, v in n["labels"].items())] for n in ns]))
