"""`gpufleet audit ls`: the append-only log of who changed what, when and why."""

import json
from typing import Annotated

import typer

from gpufleet.cli.client import api_path
from gpufleet.cli.commands.common import AllPages, JsonFlag, Limit, query, show_listing
from gpufleet.cli.output import table, when
from gpufleet.domain.access import AuditSubject

app = typer.Typer(help="The audit log.", no_args_is_help=True)


@app.command("ls")
def list_events(
    subject_kind: Annotated[AuditSubject | None, typer.Option(
        "--subject-kind", help="What the events are about.")] = None,
    subject: Annotated[str | None, typer.Option(
        "--subject", help="The subject's name or id.")] = None,
    action: Annotated[str | None, typer.Option(
        "--action", help="e.g. node.cordoned, token.created.")] = None,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List audit events, newest first."""
    params = query(subject_kind=subject_kind, subject=subject, action=action, limit=limit)
    show_listing(api_path("audit-events"), params, all_pages=all_pages, as_json=as_json,
                 render=events_table, what="events")


def events_table(events: list[dict]):
    return table(
        ["id", "at", "actor", "action", "subject", "reason", "details"],
        [[e["id"], when(e["at"]), e["actor"], e["action"],
          f"{e['subject_kind']} {e['subject']}", e["reason"],
          json.dumps(e["details"], sort_keys=True) if e["details"] else None]
         for e in events])
