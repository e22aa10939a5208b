"""The `gpufleet` command: the Typer app and the one place errors become one line.

Any `CliError` (the server's error body, an unreachable server, no token, an invalid
setting) ends the command with `error: <message>` on stderr and exit status 1 — never a
traceback, which would bury the message and could print a token. Usage errors stay
Typer's, with exit status 2.

Commands are loaded lazily: `COMMANDS` names each one's module and one-line help, and a
command's module is imported only when that command runs or its own help is shown. So
`gpufleet --help` imports no command module, and `gpufleet fleet summary` does not load
the placement engine, the metric catalogue, the server's settings or the agent (importing
them all cost every command ~1 s of CPU; BENCHMARKS.md, "CLI start-up").

Help is Click's plain text, not Typer's Rich panels: drawing those imports Rich's whole
console, more than the rest of `gpufleet --help` together. Tables stay Rich.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer
import typer.main
from typer.core import TyperGroup
from typer.models import CommandInfo

from gpufleet.cli.errors import CliError

if TYPE_CHECKING:  # Typer's Click (vendored since Typer 0.22); names for annotations only
    from typer._click import Command, Context, HelpFormatter

COMMANDS_PACKAGE = "gpufleet.cli.commands"


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (`module.attribute`: a Typer group or a command function) and
    its one-line help for `gpufleet --help` (a test holds it equal to the command's own)."""

    module: str
    attribute: str
    help: str


COMMANDS: dict[str, LazyCommand] = {
    "login": LazyCommand("auth", "login", "Check a token against a server, then store both "
                         "for later commands (mode 600)."),
    "logout": LazyCommand("auth", "logout", "Forget the stored login. The token stays valid "
                          "until revoked (`gpufleet token revoke`)."),
    "whoami": LazyCommand("auth", "whoami", "Show who the configured token authenticates as."),
    "serve": LazyCommand("processes", "serve", "Run the gpufleet server (flags override "
                         "GPUFLEET_* settings and the config file)."),
    "demo": LazyCommand("processes", "demo", "Run a server with a simulated fleet, to "
                        "explore gpufleet without GPUs."),
    "agent": LazyCommand("processes", "agent", "Run the node agent: register this node, "
                         "heartbeat, and collect and upload telemetry."),
    "whatif": LazyCommand("whatif", "whatif", "Replay a workload through the placement "
                          "engine and report allocation, refusals and fragmentation."),
    "query": LazyCommand("telemetry", "query_command", "A metric over time per group, "
                         "aggregated by its class (percentages averaged, usage summed)."),
    "funnel": LazyCommand("telemetry", "funnel_command", "Total / allocated / active / "
                          "effective GPU-hours over the window (docs/design.md, Funnel and "
                          "activity)."),
    "idle": LazyCommand("telemetry", "idle_command", "Allocations idle for the whole idle "
                        "window, and since when."),
    "top": LazyCommand("telemetry", "top_command", "A live view of the fleet: per "
                       "environment and project, busiest and idlest GPUs."),
    "zombies": LazyCommand("telemetry", "zombies_command", "Processes holding GPU memory "
                           "with no binding, after their binding ended, or doing nothing "
                           "for the idle window."),
    "unattributed": LazyCommand("telemetry", "unattributed_command", "Usage charged to "
                                "nobody: on units no binding holds, or claiming an "
                                "allocation that does not hold its unit."),
    "config": LazyCommand("config", "app", "Settings: effective values and their "
                          "documentation."),
    "metrics": LazyCommand("metrics", "app", "The metric catalogue: every metric, its unit, "
                           "class and sources."),
    "fleet": LazyCommand("fleet", "app", "The GPU fleet: summary, listing and details."),
    "node": LazyCommand("nodes", "app", "Nodes: list, inspect, cordon, uncordon, retire."),
    "gpu": LazyCommand("gpus", "app", "One GPU: health and moves between nodes."),
    "token": LazyCommand("tokens", "app", "API tokens and join tokens."),
    "user": LazyCommand("people", "users", "Users: people who hold tokens and belong to "
                        "projects."),
    "project": LazyCommand("people", "projects", "Projects: the unit of ownership, quota and "
                           "billing."),
    "request": LazyCommand("requests", "app", "GPU requests: ask, approve, use, release."),
    "pool": LazyCommand("pools", "app", "Pools: capacity dedicated to one project."),
    "environment": LazyCommand("environments", "app", "Environments: where GPUs live (cloud "
                               "regions, on-prem clusters)."),
    "audit": LazyCommand("audit", "app", "The audit log."),
    "events": LazyCommand("events", "app", "Events: every audited change, as it happens; "
                          "webhook subscriptions."),
    "mig": LazyCommand("mig", "app", "MIG layouts: export them for NVIDIA mig-parted."),
    "alerts": LazyCommand("alerts", "app", "Alerts: list, inspect, acknowledge, silence, "
                          "history."),
    "reclaim": LazyCommand("reclaim", "app", "Reclamation: idle allocations back to the pool."),
    "receivers": LazyCommand("receivers", "app", "Receivers: where notifications go (Slack, "
                             "e-mail, webhooks, Alertmanager, the users' inbox)."),
    "notifications": LazyCommand("notifications", "app", "Your notifications: what gpufleet "
                                 "told you."),
    "billing": LazyCommand("billing", "app", "Chargeback: rate cards, statements and their "
                           "export."),
    "rules": LazyCommand("rules", "app", "Alert rules: list, check and test rule files, "
                         "export for Prometheus."),
    "chatops": LazyCommand("chatops", "app", "Chat-ops: link Slack and Mattermost users to "
                           "gpufleet users."),
}


def _plain_help(command: Command) -> None:
    """Plain-text help for a command and everything under it (see the module docstring)."""
    command.rich_markup_mode = None  # type: ignore[attr-defined]
    for child in getattr(command, "commands", {}).values():
        _plain_help(child)


def load_command(name: str) -> Command:
    """Import the module of the command `name` and build its Click command."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(f"{COMMANDS_PACKAGE}.{entry.module}"),
                     entry.attribute)
    if isinstance(target, typer.Typer):
        command: Command = typer.main.get_group(target)
    else:
        command = typer.main.get_command_from_info(
            CommandInfo(name=name, callback=target), pretty_exceptions_short=True,
            rich_markup_mode=None)
    command.name = name
    _plain_help(command)
    return command


class _LazyCommands(MutableMapping[str, "Command"]):
    """The group's commands by name: every name known at once, each loaded on first use."""

    def __init__(self) -> None:
        self._loaded: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded[name] = load_command(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._loaded if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self._loaded)


class _LazyOneLineErrors(TyperGroup):
    """Loads each command when it is used, lists them all from `COMMANDS` without loading
    any, and turns understood failures into one line at the top of every command's call."""

    def __init__(self, **kwargs) -> None:
        kwargs["rich_markup_mode"] = None
        super().__init__(**kwargs)
        self.commands = _LazyCommands()

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = [(name, entry.help) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CliError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_LazyOneLineErrors, name="gpufleet", no_args_is_help=True,
    pretty_exceptions_show_locals=False, rich_markup_mode=None,
    help="gpufleet: who is using how many GPUs, where, and how well.",
)


@app.callback()
def _every_command() -> None:
    """Runs before any command; it makes `app` a group although it registers none."""


def run() -> None:
    """The `gpufleet` console script."""
    app(prog_name="gpufleet")
