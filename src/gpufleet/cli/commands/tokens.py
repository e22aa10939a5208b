"""`gpufleet token create | join | ls | revoke`: API tokens and node join tokens.

A secret is printed once, when it is issued: the server stores only its hash.
"""

from typing import Annotated

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import (
    AllPages,
    JsonFlag,
    Limit,
    Reason,
    body,
    query,
    show_listing,
)
from gpufleet.cli.output import done, note, print_json, table, when
from gpufleet.domain.access import Role, TokenKind

app = typer.Typer(help="API tokens and join tokens.", no_args_is_help=True)

SHOWN_ONCE = "store it now: it is not shown again"


@app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="What the token is for.")],
    role: Annotated[Role | None, typer.Option(
        "--role", help="The token's role (a user's token carries the user's role).")] = None,
    user: Annotated[str | None, typer.Option("--user", help="The user it acts as.")] = None,
    expires_in_days: Annotated[int | None, typer.Option(
        "--expires-in-days", min=1, help="Lifetime; default: the server's api_token_ttl_days.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Issue an API token for a role or a user."""
    with connect() as api:
        issued = api.post(api_path("tokens"), body(name=name, role=role, user=user,
                                                   expires_in_days=expires_in_days))
    if as_json:
        print_json(issued)
        return
    owner = f"user {issued['user']}, " if issued["user"] else ""
    done(f"created token {issued['id']} '{issued['name']}' ({owner}role {issued['role']}, "
         f"expires {when(issued['expires_at'])}):")
    done(issued["token"])
    note(SHOWN_ONCE)


@app.command("join")
def join(
    environment: Annotated[str, typer.Option(
        "--environment", "-e", help="The environment the joining nodes belong to.")],
    count: Annotated[int, typer.Option("--count", min=1, help="How many tokens.")] = 1,
    expires_in_s: Annotated[int | None, typer.Option(
        "--expires-in-s", help="Lifetime in seconds; default: the server's join_token_ttl_s.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Issue single-use join tokens; each lets one agent register one node."""
    with connect() as api:
        issued = api.post(api_path("join-tokens"), body(
            environment=environment, count=count, expires_in_s=expires_in_s))
    if as_json:
        print_json(issued)
        return
    tokens = issued["tokens"]
    done(f"created {len(tokens)} join token(s) for environment {environment}, expiring "
         f"{when(tokens[0]['expires_at'])}:")
    for token in tokens:
        done(token["token"])
    note(f"each admits one node; {SHOWN_ONCE}")


@app.command("ls")
def list_tokens(
    include_revoked: Annotated[bool, typer.Option(
        "--include-revoked", help="Show revoked tokens too.")] = False,
    role: Annotated[Role | None, typer.Option("--role", help="Only tokens of this role.")
                    ] = None,
    kind: Annotated[TokenKind | None, typer.Option(
        "--kind", help="agent: node credentials (one per node); user: tokens of people and "
                       "automation.")] = None,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List API tokens, oldest first (their prefixes, never their secrets)."""
    params = query(include_revoked=include_revoked or None, role=role, kind=kind, limit=limit)
    show_listing(api_path("tokens"), params, all_pages=all_pages, as_json=as_json,
                 what="tokens", render=lambda rows: table(
                     ["id", "name", "prefix", "role", "user", "node", "created by", "created",
                      "expires", "last used", "revoked"],
                     [[t["id"], t["name"], t["prefix"], t["role"], t["user"], t["node"],
                       t["created_by"], when(t["created_at"]), when(t["expires_at"]),
                       when(t["last_used_at"]), when(t["revoked_at"])] for t in rows]))


@app.command("revoke")
def revoke(token_id: Annotated[int, typer.Argument(help="The token's id (see token ls).")],
           reason: Reason = None) -> None:
    """Revoke an API token at once; requests carrying it are refused from now on."""
    with connect() as api:
        token = api.post(api_path("tokens", token_id, "revoke"), body(reason=reason))
    done(f"revoked token {token['id']} '{token['name']}' at {when(token['revoked_at'])}")
