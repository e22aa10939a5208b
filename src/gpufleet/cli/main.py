"""The `gpufleet` command: the Typer app and the one place errors become one line.

Any `CliError` (the server's error body, an unreachable server, no token, an invalid
setting) ends the command with `error: <message>` on stderr and exit status 1 — never a
traceback, which would bury the message and could print a token. Usage errors stay
Typer's, with exit status 2.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from gpufleet.cli.commands import (
    audit,
    auth,
    config,
    environments,
    fleet,
    gpus,
    metrics,
    mig,
    nodes,
    people,
    pools,
    processes,
    requests,
    telemetry,
    tokens,
    whatif,
)
from gpufleet.cli.errors import CliError


class _OneLineErrors(TyperGroup):
    """Turns understood failures into one line at the top of every command's call."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CliError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_OneLineErrors, name="gpufleet", no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="gpufleet: who is using how many GPUs, where, and how well.",
)

app.command("login")(auth.login)
app.command("logout")(auth.logout)
app.command("whoami")(auth.whoami)
app.add_typer(config.app, name="config")
app.add_typer(metrics.app, name="metrics")
app.add_typer(fleet.app, name="fleet")
app.add_typer(nodes.app, name="node")
app.add_typer(gpus.app, name="gpu")
app.add_typer(tokens.app, name="token")
app.add_typer(people.users, name="user")
app.add_typer(people.projects, name="project")
app.add_typer(requests.app, name="request")
app.add_typer(pools.app, name="pool")
app.add_typer(environments.app, name="environment")
app.add_typer(audit.app, name="audit")
app.add_typer(mig.app, name="mig")
app.command("serve")(processes.serve)
app.command("demo")(processes.demo)
app.command("agent")(processes.agent)
app.command("whatif")(whatif.whatif)
app.command("query")(telemetry.query_command)
app.command("funnel")(telemetry.funnel_command)
app.command("idle")(telemetry.idle_command)
app.command("top")(telemetry.top_command)


def run() -> None:
    """The `gpufleet` console script."""
    app(prog_name="gpufleet")
