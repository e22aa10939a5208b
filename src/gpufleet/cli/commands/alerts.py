"""`gpufleet alerts ls | show | ack | history | silence`: alerts and silences.

`alerts silence --matcher project=vision --for 2h --comment …` creates a silence;
`alerts silence ls` lists them and `alerts silence expire ID` ends one now
(docs/operations.md, "Silences").
"""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import AllPages, JsonFlag, Limit, body, query, show_listing
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import emit, emit_done, fields, labels_text, table, when
from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.domain.operations.notifications import Severity

app = typer.Typer(help="Alerts: list, inspect, acknowledge, silence, history.",
                  no_args_is_help=True)
silence_app = typer.Typer(help="Silences: mute the alerts that match, for a while. "
                               "Without a subcommand, create one.")
app.add_typer(silence_app, name="silence")

Fingerprint = Annotated[str, typer.Argument(help="The alert's fingerprint (see alerts ls).")]
Matchers = Annotated[list[str] | None, typer.Option(
    "--matcher", "-m", help="A label matcher: key=value, key!=value, key=~regex, key!~regex "
    "(alertname is the rule); repeat: all must match.")]


@app.command("ls")
def list_alerts(
    state: Annotated[list[AlertState] | None, typer.Option(
        "--state", help="Only this state; repeat for several.")] = None,
    rule: Annotated[list[str] | None, typer.Option("--rule", help="Only this rule.")] = None,
    severity: Annotated[list[Severity] | None, typer.Option("--severity")] = None,
    project: Annotated[list[str] | None, typer.Option(
        "--project", "-p", help="Only alerts naming this project.")] = None,
    environment: Annotated[list[str] | None, typer.Option("--environment", "-e")] = None,
    matcher: Matchers = None,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List alerts, newest first."""
    params = query(state=state, rule=rule, severity=severity, project=project,
                   environment=environment, matcher=matcher, limit=limit)
    show_listing(api_path("alerts"), params, all_pages=all_pages, as_json=as_json,
                 render=alerts_table, what="alerts")


def _flags(a: dict) -> str:
    marks = [word for word, on in (("silenced", a["silenced"]), ("flapping", a["flapping"]),
                                   ("acked", a["acked_by"])) if on]
    return ",".join(marks)


def alerts_table(alerts: list[dict]):
    return table(
        ["fingerprint", "state", "rule", "severity", "since", "allocation", "project",
         "owner", "unit", "flags", "evidence"],
        [[a["fingerprint"], a["state"], a["rule"], a["severity"], when(a["active_since"]),
          a["labels"].get("allocation"), a["labels"].get("project"), a["labels"].get("owner"),
          a["labels"].get("mig_instance") or a["labels"].get("gpu") or a["labels"].get("node"),
          _flags(a), a["evidence"]] for a in alerts])


def alert_detail(a: dict):
    return fields({
        "fingerprint": a["fingerprint"], "rule": a["rule"], "state": a["state"],
        "severity": a["severity"], "summary": a["annotations"].get("summary"),
        "labels": labels_text(a["labels"]), "owners": ", ".join(a["owners"]),
        "active since": when(a["active_since"]), "fired": when(a["fired_at"]),
        "resolved": when(a["resolved_at"]), "last seen": when(a["last_seen_at"]),
        "value": a["annotations"].get("value", a["last_value"]), "evidence": a["evidence"],
        "flapping": a["flapping"],
        "silenced by": ", ".join(map(str, a["silenced_by"])),
        "acknowledged": f"{a['acked_by']} at {when(a['acked_at'])}, until "
                        f"{when(a['acked_until']) if a['acked_until'] else 'resolved'}"
                        if a["acked_by"] else None,
        "last told": f"{a['notified_state']} at {when(a['notified_at'])}"
                     if a["notified_state"] else None,
    }, title=f"alert {a['fingerprint']}")


@app.command("show")
def show(fingerprint: Fingerprint, as_json: JsonFlag = False) -> None:
    """One alert: its labels, owners, evidence, acknowledgement and silences."""
    with connect() as api:
        alert = api.get(api_path("alerts", fingerprint))
    emit(alert, as_json, alert_detail)


@app.command("ack")
def ack(
    fingerprint: Fingerprint,
    duration: Annotated[str | None, typer.Option(
        "--for", help="No repeat notifications for this long (e.g. 4h); default: until it "
        "resolves.")] = None,
    comment: Annotated[str | None, typer.Option("--comment", help="Why; kept in history.")
                       ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Acknowledge an alert: no repeat notifications (its resolution is still told)."""
    with connect() as api:
        alert = api.post(api_path("alerts", fingerprint, "ack"),
                         body(duration=duration, comment=comment))
    until = when(alert["acked_until"]) if alert["acked_until"] else "it resolves"
    emit_done(alert, as_json, f"acknowledged alert {fingerprint} ({alert['rule']}) until "
                              f"{until}")


@app.command("history")
def history(
    fingerprint: Annotated[str | None, typer.Argument(
        help="Only this alert's history.")] = None,
    rule: Annotated[str | None, typer.Option("--rule", help="Only this rule's alerts.")
                    ] = None,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """What happened to alerts, newest first: state changes, acknowledgements, notices."""
    params = query(fingerprint=fingerprint, rule=rule, limit=limit)
    show_listing(api_path("alerts", "history"), params, all_pages=all_pages, as_json=as_json,
                 what="alert events", render=lambda rows: table(
                     ["at", "fingerprint", "rule", "event", "actor", "value", "detail"],
                     [[when(h["at"]), h["fingerprint"], h["rule"], h["event"], h["actor"],
                       h["value"], h["detail"]] for h in rows]))


@silence_app.callback(invoke_without_command=True)
def silence(
    ctx: typer.Context,
    matcher: Matchers = None,
    duration: Annotated[str | None, typer.Option(
        "--for", help="How long (e.g. 2h, 1d).")] = None,
    comment: Annotated[str | None, typer.Option("--comment", help="Why (required).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a silence: `alerts silence --matcher project=vision --for 2h --comment …`."""
    if ctx.invoked_subcommand is not None:
        return
    if not matcher:
        raise CliError("a silence needs at least one --matcher (e.g. project=vision): one "
                       "without would mute every alert")
    if not duration or not comment:
        raise CliError("a silence needs --for (e.g. 2h) and --comment")
    with connect() as api:
        created = api.post(api_path("silences"), body(matchers=matcher, duration=duration,
                                                      comment=comment))
    emit_done(created, as_json, f"created silence {created['id']} "
                                f"({', '.join(created['matchers'])}) until "
                                f"{when(created['ends_at'])}")


def silences_table(rows: list[dict]):
    return table(["id", "state", "matchers", "starts", "ends", "created by", "comment"],
                 [[s["id"], s["state"], " ".join(s["matchers"]), when(s["starts_at"]),
                   when(s["ends_at"]), s["created_by"], s["comment"]] for s in rows])


@silence_app.command("ls")
def list_silences(
    include_expired: Annotated[bool, typer.Option(
        "--include-expired", help="Show expired silences too.")] = False,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List silences, newest first."""
    params = query(include_expired=include_expired or None, limit=limit)
    show_listing(api_path("silences"), params, all_pages=all_pages, as_json=as_json,
                 render=silences_table, what="silences")


@silence_app.command("expire")
def expire(silence_id: Annotated[int, typer.Argument(help="The silence's id.")],
           as_json: JsonFlag = False) -> None:
    """End a silence now; the alerts it muted are told at the next evaluation."""
    with connect() as api:
        expired = api.delete(api_path("silences", silence_id))
    emit_done(expired, as_json, f"expired silence {expired['id']} at "
                                f"{when(expired['ends_at'])}")
