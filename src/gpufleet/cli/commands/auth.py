"""`gpufleet login`, `logout` and `whoami`: who the CLI talks to, and as whom."""

import os
from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, configured_login, connect, connect_to
from gpufleet.cli.commands.common import JsonFlag
from gpufleet.cli.errors import ApiError, CliError
from gpufleet.cli.output import done, emit, fields, note
from gpufleet.config_files import login_file_path, store_login

OVERRIDING_ENV = ("GPUFLEET_URL", "GPUFLEET_TOKEN")


def _identity(who: dict[str, Any]) -> str:
    name = who.get("user") or who.get("node") or who["actor"]
    return f"{name} (role {who['role']})"


def login(
    url: Annotated[str | None, typer.Option(
        "--url", help="Server URL; default: the configured one.")] = None,
    token: Annotated[str | None, typer.Option(
        "--token", help="API token; asked for (hidden) when not given.")] = None,
) -> None:
    """Check a token against a server, then store both for later commands (mode 600)."""
    url = url or configured_login().url
    if token is None:
        token = typer.prompt("API token", hide_input=True)
    token = token.strip()
    if not token:
        raise CliError("an empty token cannot log in")
    with connect_to(url, token) as api:
        try:
            who = api.get(api_path("whoami"))
        except ApiError as exc:
            if exc.status != 401:
                raise
            raise CliError(f"{api.url} refused this token: {exc.message} ({exc.code})") from None
        path = store_login(api.url, token)
    done(f"logged in to {api.url} as {_identity(who)}; saved to {path}")
    overriding = [name for name in OVERRIDING_ENV if os.environ.get(name)]
    if overriding:
        note(f"note: {' and '.join(overriding)} set in the environment override this login")


def logout() -> None:
    """Forget the stored login. The token stays valid until revoked (`gpufleet token revoke`)."""
    path = login_file_path()
    try:
        path.unlink()
    except FileNotFoundError:
        done("not logged in: no stored login to remove")
        return
    done(f"logged out: removed {path}")


def whoami(as_json: JsonFlag = False) -> None:
    """Show who the configured token authenticates as."""
    with connect() as api:
        who = api.get(api_path("whoami"))
        url = api.url
    emit(who, as_json, lambda w: fields({
        "server": url, "actor": w["actor"], "role": w["role"], "user": w["user"],
        "node": w["node"], "projects": ", ".join(w["projects"]),
    }))
