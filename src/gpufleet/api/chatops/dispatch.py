"""`/gpu` commands and approval buttons, run as the chat user's linked gpufleet user.

Every verb is the service call its API route makes, with the principal the chat user maps
to (`ChatOps.principal_of`): authorisation is never re-implemented here, and a refusal —
Forbidden, NotFound, InvalidInput, Conflict — comes back in the server's own words as an
ephemeral `error_reply`. Only `help` and `link` answer an unlinked chat user; anything else
tells them how to link and runs nothing.

Answers are synchronous: every verb is a few indexed reads or one write (a request's
creation grants an auto-approved one on the in-memory placement cache), well inside the
3 s Slack allows a slash command (docs/chatops.md, "Answering within three seconds").
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from gpufleet.api.chatops.payloads import APPROVE, Interaction, SlashCommand, request_create
from gpufleet.domain.chatops import blocks
from gpufleet.domain.chatops.commands import (
    CodeCommand,
    Command,
    HelpCommand,
    RequestCommand,
    Unparsed,
    parse,
)
from gpufleet.domain.errors import GpufleetError
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.chatops.identity import LINK_CODE_TTL, ChatUser

log = logging.getLogger(__name__)
MINE_LIMIT = 100  # `mine` reads the newest this many; the reply shows 20 and counts the rest


def _json(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json")


def run_slash_command(gf: Gpufleet, platform: str, slash: SlashCommand) -> blocks.Message:
    """The whole reply to one `/gpu …`."""
    who = ChatUser(platform, slash.team_id, slash.user_id)
    command = parse(slash.text)
    if isinstance(command, HelpCommand):
        return blocks.help_reply(command.topic)
    if not isinstance(command, Unparsed) and command.verb == "link":
        code = gf.chatops.issue_link_code(who)
        return blocks.link_code_reply(code, int(LINK_CODE_TTL.total_seconds() // 60))
    principal = gf.chatops.principal_of(who)
    if principal is None:
        return blocks.not_linked_reply()
    if isinstance(command, Unparsed):
        return blocks.unparsed_reply(command)
    try:
        return _run(gf, principal, who, command, slash.channel_id)
    except GpufleetError as exc:
        return blocks.error_reply(exc.message)
    except ValidationError as exc:  # a name the API's schema refuses (`--project Vision`)
        return blocks.error_reply(_validation_problem(exc))


def _run(gf: Gpufleet, principal: Principal, who: ChatUser, command: Command,
         channel_id: str) -> blocks.Message:
    lifecycle = gf.lifecycle
    if isinstance(command, RequestCommand):
        created = lifecycle.create_request(
            principal, request_create(command),
            also=gf.chatops.origin_writer(principal, who, channel_id))
        return blocks.status_reply(_json(created), "request")
    if isinstance(command, CodeCommand):
        if command.verb == "status":
            return blocks.status_reply(_json(lifecycle.show_request(principal, command.code)))
        if command.verb == "why":
            return blocks.why_reply(_json(lifecycle.why(principal, command.code)))
        released = lifecycle.release(principal, command.code, None)
        _record(gf, principal, who, "release", released.code)
        return blocks.status_reply(_json(released), "release")
    if command.verb == "mine":
        page = lifecycle.list_requests(principal, state=None, project=None, cursor=None,
                                       limit=MINE_LIMIT)
        return blocks.mine_reply([_json(r) for r in page.items])
    if command.verb == "idle":
        return blocks.idle_reply(_json(gf.queries.idle(principal, limit=blocks.MINE_SHOWN)))
    raise AssertionError(f"no dispatch for verb {command.verb!r}")  # the grammar's verbs


def _record(gf: Gpufleet, principal: Principal, who: ChatUser, verb: str, code: str) -> None:
    """`ChatOps.record_command` after the change committed: if this second write fails,
    the change stands and the reply still tells it truly; only the chat record is lost."""
    try:
        gf.chatops.record_command(principal, who, verb, code)
    except Exception:
        log.exception("could not record chat command %s on %s", verb, code)


def _validation_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "the command"
    return f"{where}: {first.get('msg', 'is not valid')}"


def run_approval(gf: Gpufleet, interaction: Interaction) -> tuple[blocks.Message, bool]:
    """An Approve / Reject button pressed: (the reply, whether it replaces the approval
    message). Only a linked user whom the lifecycle lets decide changes anything; anyone
    else, and a request already decided, gets an ephemeral answer and nothing changes."""
    action = interaction.approval()
    if action is None:
        return blocks.error_reply("this button is not one gpufleet knows"), False
    who = ChatUser("slack", interaction.team_id, interaction.user_id)
    principal = gf.chatops.principal_of(who)
    if principal is None:
        return blocks.not_linked_reply(), False
    try:
        if action.decision == APPROVE:
            decided = gf.lifecycle.approve(principal, action.code, None)
        else:
            decided = gf.lifecycle.reject(principal, action.code, None)
    except GpufleetError as exc:
        return blocks.error_reply(f"{action.code}: {exc.message}"), False
    _record(gf, principal, who, action.decision, decided.code)
    return blocks.decided_message(
        _json(decided), blocks.actor_name(decided.decided_by or principal.actor)), True
