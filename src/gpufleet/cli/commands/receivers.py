"""`gpufleet receivers add | ls | enable | disable | set | rm | test | log`: where notifications go
(docs/operations.md, "Receivers")."""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import AllPages, JsonFlag, Limit, body, query, show_listing
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import emit_done, table

app = typer.Typer(help="Receivers: where notifications go (Slack, e-mail, webhooks, "
                       "Alertmanager, the users' inbox).", no_args_is_help=True)

KINDS = ("webhook", "slack_webhook", "slack", "email", "alertmanager", "inbox")


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="e.g. ops-slack, vision-mail.")],
    kind: Annotated[str, typer.Option("--kind", help=f"One of: {', '.join(KINDS)}.")],
    url: Annotated[str | None, typer.Option(
        "--url", help="webhook / slack_webhook / alertmanager: where to send.")] = None,
    to: Annotated[list[str] | None, typer.Option(
        "--to", help="email: an address of the broadcast copy; repeat for several.")] = None,
    from_address: Annotated[str | None, typer.Option("--from", help="email: From:.")] = None,
    smtp_host: Annotated[str | None, typer.Option("--smtp-host", help="email.")] = None,
    smtp_port: Annotated[int | None, typer.Option("--smtp-port", help="email (25).")] = None,
    starttls: Annotated[bool | None, typer.Option(
        "--starttls", help="email: TLS before login and sending; the server's certificate "
                           "is verified.")] = None,
    ca_file: Annotated[str | None, typer.Option(
        "--ca-file", help="email: PEM of the CAs to trust for STARTTLS instead of the "
                          "system's (a path on the gpufleet server).")] = None,
    username: Annotated[str | None, typer.Option("--username", help="email: SMTP login.")
                        ] = None,
    password: Annotated[str | None, typer.Option(
        "--password", help="email: SMTP password (never shown again).")] = None,
    secret: Annotated[str | None, typer.Option(
        "--secret", help="webhook: HMAC key of X-Gpufleet-Signature (never shown again).")
    ] = None,
    token: Annotated[str | None, typer.Option(
        "--token", help="slack: bot token xoxb-… (never shown again).")] = None,
    channel: Annotated[str | None, typer.Option(
        "--channel", help="slack: channel of the broadcast copy.")] = None,
    api_url: Annotated[str | None, typer.Option(
        "--api-url", help="slack: Web API base URL (default https://slack.com/api/).")] = None,
    matchers: Annotated[list[str] | None, typer.Option(
        "--matcher", help="Label matcher the broadcast copy requires (project=vision, "
                          "severity!=info, node=~gpu-.*); repeat for several.")] = None,
    min_severity: Annotated[str | None, typer.Option(
        "--min-severity", help="info, warning or critical (default info).")] = None,
    kinds: Annotated[list[str] | None, typer.Option(
        "--kind-filter", "--only", help="Only these notification kinds (globs: alert.*, "
                                        "health.*); repeat for several.")] = None,
    tells_owners: Annotated[bool | None, typer.Option(
        "--tells-owners/--no-tells-owners",
        help="Also tell each owner a notification names (default: inbox only).")] = None,
    no_broadcast: Annotated[bool, typer.Option(
        "--no-broadcast", help="Only tell owners: no copy to the receiver's channel.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a receiver (admins). The server checks the options against the kind."""
    config = body(url=url, to=to or None, host=smtp_host, port=smtp_port, starttls=starttls,
                  ca_file=ca_file, username=username, password=password, secret=secret, token=token,
                  channel=channel, api_url=api_url, **{"from": from_address})
    with connect() as api:
        receiver = api.post(api_path("receivers"), body(
            name=name, kind=kind, config=config, matchers=matchers or None,
            kinds=kinds or None, min_severity=min_severity, tells_owners=tells_owners,
            broadcast=False if no_broadcast else None))
    emit_done(receiver, as_json, f"added receiver {receiver['name']} ({receiver['kind']}; "
                                 f"{_audience(receiver)})")


def _audience(r: dict) -> str:
    parts = (["broadcast"] if r["broadcast"] else []) + (
        ["tells owners"] if r["tells_owners"] else [])
    return ", ".join(parts)


def _target(r: dict) -> str:
    c = r["config"]
    return str(c.get("channel") or ", ".join(c.get("to") or []) or c.get("url")
               or c.get("host") or "")


@app.command("ls")
def list_receivers(limit: Limit = None, all_pages: AllPages = False,
                   as_json: JsonFlag = False) -> None:
    """List receivers, with their messages waiting and abandoned (secrets show as set)."""
    show_listing(api_path("receivers"), query(limit=limit), all_pages=all_pages,
                 as_json=as_json, what="receivers", render=lambda rs: table(
                     ["name", "kind", "target", "audience", "matchers", "kinds",
                      "min severity", "enabled", "waiting", "abandoned"],
                     [[r["name"], r["kind"], _target(r), _audience(r),
                       " ".join(r["matchers"]), " ".join(r["kinds"]) or "*",
                       r["min_severity"], "yes" if r["enabled"] else "no",
                       r["pending"], r["abandoned"]] for r in rs]))


@app.command("enable")
def enable(name: str, as_json: JsonFlag = False) -> None:
    """Enable a receiver (admins): what it held while disabled is sent on the next round."""
    with connect() as api:
        receiver = api.patch(api_path("receivers", name), {"enabled": True})
    emit_done(receiver, as_json, f"enabled receiver {name} ({receiver['pending']} waiting "
                                 "message(s) to send)")


@app.command("disable")
def disable(name: str, as_json: JsonFlag = False) -> None:
    """Disable a receiver (admins): nothing new is queued for it, and what is queued is
    held — not sent, not lost — until `gpufleet receivers enable`."""
    with connect() as api:
        receiver = api.patch(api_path("receivers", name), {"enabled": False})
    emit_done(receiver, as_json, f"disabled receiver {name} ({receiver['pending']} waiting "
                                 "message(s) held until it is enabled)")


@app.command("set")
def change(
    name: str,
    matchers: Annotated[list[str] | None, typer.Option(
        "--matcher", help="Label matcher the broadcast copy requires; repeat for several. "
                          "Replaces the receiver's matchers.")] = None,
    no_matchers: Annotated[bool, typer.Option(
        "--no-matchers", help="Remove every matcher: the broadcast copy takes all.")] = False,
    kinds: Annotated[list[str] | None, typer.Option(
        "--only", help="Only these notification kinds (globs); repeat for several. "
                       "Replaces the receiver's kinds.")] = None,
    all_kinds: Annotated[bool, typer.Option(
        "--all-kinds", help="Take every kind (but events) again.")] = False,
    min_severity: Annotated[str | None, typer.Option(
        "--min-severity", help="info, warning or critical.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Change a receiver's routing (admins); what is not given stays as it is."""
    if matchers and no_matchers:
        raise CliError("give --matcher or --no-matchers, not both")
    if kinds and all_kinds:
        raise CliError("give --only or --all-kinds, not both")
    with connect() as api:
        receiver = api.patch(api_path("receivers", name), body(
            matchers=[] if no_matchers else matchers or None,
            kinds=[] if all_kinds else kinds or None, min_severity=min_severity))
    emit_done(receiver, as_json, f"changed receiver {name}: matchers "
                                 f"{' '.join(receiver['matchers']) or '(none)'}, kinds "
                                 f"{' '.join(receiver['kinds']) or '*'}, min severity "
                                 f"{receiver['min_severity']}")


@app.command("rm")
def remove(name: str, as_json: JsonFlag = False) -> None:
    """Remove a receiver with its waiting messages and delivery log (admins)."""
    with connect() as api:
        receiver = api.delete(api_path("receivers", name))
    emit_done(receiver, as_json, f"removed receiver {receiver['name']} "
                                 f"({receiver['pending']} waiting message(s) dropped)")


@app.command("test")
def test(name: str, as_json: JsonFlag = False) -> None:
    """Queue a test notification for this receiver alone, whatever its filters (admins)."""
    with connect() as api:
        queued = api.post(api_path("receivers", name, "test"))
    emit_done(queued, as_json, f"queued {queued['queued']} test notification(s) for {name}; "
                               f"see `gpufleet receivers log {name}`")


@app.command("log")
def log(name: str, limit: Limit = None, all_pages: AllPages = False,
        as_json: JsonFlag = False) -> None:
    """The receiver's delivery log, newest attempt first."""
    show_listing(api_path("receivers", name, "deliveries"), query(limit=limit),
                 all_pages=all_pages, as_json=as_json, what="deliveries",
                 render=lambda ds: table(
                     ["at", "message", "attempt", "outcome", "status", "ms", "kind",
                      "recipient", "detail"],
                     [[d["at"], d["message_id"], d["attempt"], d["outcome"], d["status"],
                       d["duration_ms"], d["kind"], d["recipient"] or "*",
                       (d["detail"] or "")[:60]] for d in ds]))
