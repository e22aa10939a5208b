"""Asking before an operator takes units away from allocations (`node retire`,
`gpu quarantine`).

The server ends the bindings on a retired node or a quarantined GPU and flags the
allocations that held them (docs/lifecycle.md, "When units are lost"). Before it does, the
command lists those allocations and asks; `--yes` answers for scripts. Without a terminal
to ask on, it refuses rather than guess.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from gpufleet.cli.client import ApiClient, api_path
from gpufleet.cli.commands.common import query
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import note, plural

Yes = Annotated[bool, typer.Option("--yes", "-y", help=(
    "Do not ask for confirmation (for scripts); the allocations it affects are still listed."))]

HOLDERS_SHOWN = 1000


def holders(api: ApiClient, *, node: str | None = None, gpu: str | None = None
            ) -> list[dict[str, Any]]:
    """The allocations holding units on the node or GPU now (the first 1,000)."""
    page = api.get(api_path("requests"), query(node=node, gpu=gpu, limit=HOLDERS_SHOWN))
    return page["items"]


def units_there(allocation: dict[str, Any], *, node: str | None = None,
                gpu: str | None = None) -> int:
    return sum(1 for u in allocation["units"] if u["ended_at"] is None
               and (node is None or u["node"] == node)
               and (gpu is None or u["gpu_uuid"].lower() == gpu.lower()))


def confirm(question: str, affected: list[dict[str, Any]], yes: bool, *,
            only_if_affected: bool = False, **where: str) -> None:
    """List what loses units, then ask (unless `yes`, or nothing is affected and
    `only_if_affected`); aborts with exit status 1 on no."""
    if affected:
        note(f"{plural(len(affected), 'allocation')} will lose units "
             "(they end now; owners see it in `request show`):")
        for a in affected:
            note(f"  {a['code']}  project {a['project']}  by {a['requested_by']}  "
                 f"{units_there(a, **where)} of {len(a['units'])} units")
    if yes or (only_if_affected and not affected):
        return
    if not interactive():
        raise CliError("this needs confirmation and there is no terminal to ask on: "
                       "add --yes")
    typer.confirm(question, abort=True)


def interactive() -> bool:
    return sys.stdin.isatty()
