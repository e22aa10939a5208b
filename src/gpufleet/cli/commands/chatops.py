"""`gpufleet chatops link CODE` and `gpufleet chatops identities ls | link | unlink`: which
gpufleet user a Slack or Mattermost user acts as (docs/chatops.md, "Identity").

`link CODE` is run by the person themselves, with their own token: `/gpu link` in chat
gives the code, and running it proves the chat user and the gpufleet user are one person.
`identities` is for operators (ls) and administrators (link, unlink).
"""

from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, query, show_listing
from gpufleet.cli.output import RenderableType, emit_done, table, when

app = typer.Typer(help="Chat-ops: link Slack and Mattermost users to gpufleet users.",
                  no_args_is_help=True)
identities = typer.Typer(help="Linked chat users (operators list; administrators link and "
                         "unlink).", no_args_is_help=True)
app.add_typer(identities, name="identities")

Platform = Annotated[str, typer.Option("--platform", help="slack or mattermost.")]
Team = Annotated[str, typer.Option("--team", help="The Slack workspace id (T…) or the "
                                   "Mattermost team id.")]
ChatUserId = Annotated[str, typer.Option("--chat-user", help="The chat user's id (U… in "
                                         "Slack).")]


def _said(identity: dict[str, Any]) -> str:
    return (f"{identity['platform']} user {identity['chat_user_id']} in {identity['team_id']} "
            f"acts as {identity['user']}")


@app.command("link")
def link(code: Annotated[str, typer.Argument(help="The one-time code `/gpu link` gave.")],
         as_json: JsonFlag = False) -> None:
    """Link the chat user that typed `/gpu link` to you (the token's user)."""
    with connect() as api:
        linked = api.post(api_path("chatops", "links"), {"code": code})
    emit_done(linked, as_json, f"linked: {_said(linked)}")


def identities_table(found: list[dict[str, Any]]) -> RenderableType:
    return table(["platform", "team", "chat user", "user", "linked by", "linked"],
                 [[i["platform"], i["team_id"], i["chat_user_id"], i["user"], i["linked_by"],
                   when(i["linked_at"])] for i in found])


@identities.command("ls")
def list_identities(all_pages: Annotated[bool, typer.Option("--all", help="Every page.")] = False,
                    as_json: JsonFlag = False) -> None:
    """Every linked chat user and the gpufleet user it acts as."""
    show_listing(api_path("chatops", "identities"), query(), all_pages=all_pages,
                 as_json=as_json, render=identities_table, what="linked chat users")


@identities.command("link")
def admin_link(platform: Platform, team: Team, chat_user: ChatUserId,
               user: Annotated[str, typer.Option("--user", help="The gpufleet user.")],
               as_json: JsonFlag = False) -> None:
    """Link a chat user to a gpufleet user (administrators); replaces an earlier link."""
    with connect() as api:
        linked = api.post(api_path("chatops", "identities"), {
            "platform": platform, "team_id": team, "chat_user_id": chat_user, "user": user})
    emit_done(linked, as_json, f"linked: {_said(linked)}")


@identities.command("unlink")
def unlink(platform: Platform, team: Team, chat_user: ChatUserId,
           as_json: JsonFlag = False) -> None:
    """Unlink a chat user (administrators): it can then only be told how to link."""
    with connect() as api:
        gone = api.delete(api_path("chatops", "identities", platform, team, chat_user))
    emit_done(gone, as_json, f"unlinked: {gone['platform']} user {gone['chat_user_id']} "
                             f"(was {gone['user']})")
