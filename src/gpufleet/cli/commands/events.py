"""`gpufleet events`: the event log — list it, follow it, and subscribe webhooks to it
(docs/operations.md, "Events")."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, Limit, query
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import emit, emit_done, note, print_json, table, when

app = typer.Typer(help="Events: every audited change, as it happens; webhook subscriptions.",
                  no_args_is_help=True)
subscriptions = typer.Typer(help="Webhook subscriptions to events.", no_args_is_help=True)
app.add_typer(subscriptions, name="subscriptions")

EVENTS = api_path("events")
SUBSCRIPTIONS = api_path("event-subscriptions")
# Each long poll waits at most this long, under the CLI's 30 s HTTP timeout.
FOLLOW_WAIT_S = 25

Types = Annotated[list[str] | None, typer.Option(
    "--type", "-t", help="Event type glob (request.*, gpu.health_changed); repeat for several.")]


@app.command("ls")
def list_events(
    types: Types = None,
    subject_kind: Annotated[str | None, typer.Option(
        "--subject-kind", help="Only events about this kind: request, pool, gpu, node, …")] = None,
    subject: Annotated[str | None, typer.Option(
        "--subject", help="Only events about this subject (GR-1042, a node, a GPU UUID).")] = None,
    project: Annotated[str | None, typer.Option(
        "--project", help="Only events about this project.")] = None,
    after: Annotated[int | None, typer.Option(
        "--after", min=0, help="Only events after this id (the last one you saw).")] = None,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep printing events as they happen, one line each "
        "(from now on, or after --after).")] = False,
    count: Annotated[int | None, typer.Option(
        "--count", min=1, help="With --follow: stop after this many events.")] = None,
    limit: Limit = None,
    as_json: JsonFlag = False,
) -> None:
    """List events, oldest first; with --follow, stream them (JSON lines with --json)."""
    params = query(type=types or [], subject_kind=subject_kind, subject=subject,
                   project=project, limit=limit)
    if count is not None and not follow:
        raise CliError("--count goes with --follow")
    if follow:
        _follow(params, after, count, as_json)
        return
    with connect() as api:
        page = api.get(EVENTS, [*params, *query(after=after)])
    if not as_json and not page["items"]:
        note("no events match" if params or after else "no events yet")
        return
    emit(page, as_json, lambda p: events_table(p["items"]))
    if not as_json and page.get("next_cursor"):
        note(f"more events exist: add --after {page['last_id']}")


def _follow(params: list[tuple[str, str]], after: int | None, count: int | None,
            as_json: bool) -> None:
    printed = 0
    start = query(after=after) if after is not None else query(from_now=True)
    with connect() as api:
        while True:
            page = api.get(EVENTS, [*params, *start, ("wait_s", str(FOLLOW_WAIT_S))])
            for event in page["items"]:
                typer.echo(json.dumps(event, separators=(",", ":")) if as_json
                           else event_line(event))
                printed += 1
                if count is not None and printed >= count:
                    return
            start = query(after=page["last_id"])


def event_line(event: dict[str, Any]) -> str:
    """`1234 2026-11-02 09:00Z request.approved request GR-1042 project=vision — reason`"""
    labels = " ".join(f"{k}={v}" for k, v in sorted(event["labels"].items()))
    line = (f"{event['id']} {when(event['at'])} {event['type']} {event['subject']['kind']} "
            f"{event['subject']['id']} {event['actor']}")
    if labels:
        line = f"{line} {labels}"
    return f"{line} — {event['reason']}" if event.get("reason") else line


def events_table(events: list[dict]):
    return table(["id", "at", "type", "subject", "actor", "labels", "reason"],
                 [[e["id"], when(e["at"]), e["type"],
                   f"{e['subject']['kind']} {e['subject']['id']}", e["actor"],
                   " ".join(f"{k}={v}" for k, v in sorted(e["labels"].items())) or None,
                   e["reason"]] for e in events])


@app.command("subscribe")
def subscribe(
    name: Annotated[str, typer.Argument(help="The subscription's name.")],
    url: Annotated[str, typer.Option("--url", help="Where events are POSTed.")],
    secret: Annotated[str, typer.Option(
        "--secret", prompt=True, hide_input=True,
        help="Signs each delivery (HMAC-SHA256); 16+ characters; asked for when not "
        "given, so it stays out of the shell's history. Never shown again.")],
    types: Annotated[list[str], typer.Option(
        "--type", "-t", help="Event type glob; repeat for several.")],
    where: Annotated[list[str] | None, typer.Option(
        "--where", "-w", help="A condition every event sent must meet: data.count>=8, "
        "labels.project=vision, data.models=~.*H100.*; repeat for several.")] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Send the matching events to a webhook, at least once, signed."""
    body = {"name": name, "url": url, "secret": secret, "types": types, "where": where or []}
    if description is not None:
        body["description"] = description
    with connect() as api:
        created = api.post(SUBSCRIPTIONS, body)
    emit_done(created, as_json, f"subscribed {name}: {', '.join(created['types'])}"
              + (f" where {' and '.join(created['where'])}" if created["where"] else "")
              + f" → {created['url']}")


@subscriptions.command("ls")
def list_subscriptions(as_json: JsonFlag = False) -> None:
    """List event subscriptions (never their secrets)."""
    with connect() as api:
        page = api.pages(SUBSCRIPTIONS, [], follow=True)
    if not as_json and not page["items"]:
        note("no event subscriptions yet")
        return
    emit(page, as_json, lambda p: table(
        ["name", "types", "where", "url", "created by", "created"],
        [[s["name"], ", ".join(s["types"]), " and ".join(s["where"]) or None, s["url"],
          s["created_by"], when(s["created_at"])] for s in p["items"]]))


@subscriptions.command("rm")
def remove_subscription(name: Annotated[str, typer.Argument(help="The subscription's name.")],
                        as_json: JsonFlag = False) -> None:
    """Remove an event subscription; what it had queued and not delivered goes with it."""
    with connect() as api:
        api.delete(api_path("event-subscriptions", name))
    if as_json:
        print_json({"removed": name})
    else:
        typer.echo(f"removed {name}")
