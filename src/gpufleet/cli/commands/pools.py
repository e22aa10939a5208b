"""`gpufleet pool …`: capacity dedicated to one project, once an operator approves it.

A pool is flavour × count (`H100-80GB × 16`, `H100-80GB/1g.10gb × 28`,
`L40S-48GB/shared × 8 --fraction 0.5`); approving it reserves that much free capacity, which
other projects' requests may then not take. Billing starts at approval and stops when the
pool is ended (`gpufleet pools end`).
"""

from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import (
    AllPages,
    CodeOnly,
    JsonFlag,
    Limit,
    Reason,
    body,
    only_one_output,
    query,
    show_listing,
)
from gpufleet.cli.output import (
    RenderableType,
    done,
    emit,
    emit_done,
    fields,
    print_json,
    table,
    when,
)
from gpufleet.domain.requests import PoolState

app = typer.Typer(help="Pools: capacity dedicated to one project.", no_args_is_help=True)

Code = Annotated[str, typer.Argument(help="The pool's code, e.g. POOL-3.")]
RequiredReason = Annotated[str, typer.Option("--reason", help="Why; kept in the audit log.")]


def _unit(pool: dict[str, Any]) -> str:
    """Shared pools hold fractions: their unit is what one unit takes of a GPU."""
    return f"{pool['unit_milli'] / 1000:g}" if pool["flavour"].endswith("/shared") else "1"


def pools_table(pools: list[dict[str, Any]]) -> RenderableType:
    return table(["code", "project", "flavour", "count", "unit", "used", "state", "by",
                  "requested", "approved", "ended"],
                 [[p["code"], p["project"], p["flavour"], p["count"], _unit(p),
                   f"{p['used']:g}", p["state"], p["requested_by"], when(p["requested_at"]),
                   when(p["approved_at"]), when(p.get("ended_at"))] for p in pools])


def pool_detail(pool: dict[str, Any]) -> RenderableType:
    return fields({
        "code": pool["code"], "project": pool["project"], "flavour": pool["flavour"],
        "count": pool["count"], "unit": _unit(pool), "used": f"{pool['used']:g}",
        "state": pool["state"], "reason": pool["justification"],
        "requested by": pool["requested_by"], "requested": when(pool["requested_at"]),
        "decided by": pool["decided_by"], "decided": when(pool["decided_at"]),
        "decision reason": pool["decision_reason"], "approved": when(pool["approved_at"]),
        "ended": when(pool.get("ended_at")), "ended by": pool.get("ended_by"),
        "end reason": pool.get("end_reason"),
    }, title=f"pool {pool['code']}")


def _decide(code: str, action: str, reason: str | None, as_json: bool) -> None:
    with connect() as api:
        pool = api.post(api_path("pools", code, action), body(reason=reason))
    if as_json:
        print_json(pool)
    elif pool["state"] == "active":
        done(f"{pool['code']} active: {pool['count']} × {pool['flavour']} reserved for "
             f"project {pool['project']}")
    else:
        done(f"{pool['code']} {pool['state']}")


@app.command("request")
def request_pool(
    project: Annotated[str, typer.Option("--project", "-p", help="The project it is for.")],
    flavour: Annotated[str, typer.Option(
        "--flavour", help="H100-80GB, H100-80GB/1g.10gb or L40S-48GB/shared.")],
    count: Annotated[int, typer.Option("--count", help="Units of the flavour.")],
    reason: RequiredReason,
    fraction: Annotated[float | None, typer.Option(
        "--fraction", help="Shared flavours: what each unit holds of a GPU (default 1).")
    ] = None,
    as_json: JsonFlag = False,
    code_only: CodeOnly = False,
) -> None:
    """Ask for a pool; it exists once an operator approves it."""
    only_one_output(quiet=code_only, json=as_json)
    with connect() as api:
        pool = api.post(api_path("pools"), body(project=project, flavour=flavour, count=count,
                                                fraction=fraction, reason=reason))
    if code_only:
        done(pool["code"])
        return
    emit_done(pool, as_json, f"{pool['code']} {pool['state']}")


@app.command("ls")
def list_pools(
    project: Annotated[str | None, typer.Option("--project", "-p",
                                                help="Only of this project.")] = None,
    state: Annotated[PoolState | None, typer.Option(
        "--state", "-s", help="Only pools in this state.")] = None,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List pools, oldest first (members see their own projects')."""
    show_listing(api_path("pools"), query(project=project, state=state, limit=limit),
                 all_pages=all_pages, as_json=as_json, render=pools_table, what="pools")


@app.command("show")
def show_pool(code: Code, as_json: JsonFlag = False) -> None:
    """One pool: its flavour, size, use and decision."""
    with connect() as api:
        pool = api.get(api_path("pools", code))
    emit(pool, as_json, pool_detail)


@app.command("approve")
def approve(code: Code, reason: Reason = None, as_json: JsonFlag = False) -> None:
    """Approve a pending pool: reserves its capacity (refused when there is not enough)."""
    _decide(code, "approve", reason, as_json)


@app.command("reject")
def reject(code: Code, reason: RequiredReason, as_json: JsonFlag = False) -> None:
    """Reject a pending pool."""
    _decide(code, "reject", reason, as_json)


@app.command("end")
def end(code: Code, reason: Reason = None, as_json: JsonFlag = False) -> None:
    """End an active pool now: frees its reservation and quota and stops its charge.
    Refused while requests hold its units (release them first)."""
    with connect() as api:
        pool = api.post(api_path("pools", code, "end"), body(reason=reason))
    emit_done(pool, as_json, f"{pool['code']} ended: {pool['count']} × {pool['flavour']} "
                             f"no longer reserved for project {pool['project']}")
