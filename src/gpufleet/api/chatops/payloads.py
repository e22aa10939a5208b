"""Slack's request bodies, read only from a `VerifiedBody` (see `signature`).

A slash command is form-encoded (`command=/gpu&text=…&user_id=…&response_url=…`); Mattermost's
slash commands send the same field names. An interactivity request (a button pressed) is
form-encoded too, with one field, `payload`, holding JSON. Anything else — a missing field, a
field given twice, JSON that is not an object — is a `PayloadError` (400) naming it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from gpufleet.api.chatops.signature import VerifiedBody
from gpufleet.domain.chatops.approvals import APPROVE as APPROVE  # read with the payloads
from gpufleet.domain.chatops.approvals import DECISIONS, ApprovalAction
from gpufleet.domain.chatops.approvals import REJECT as REJECT
from gpufleet.domain.chatops.commands import RequestCommand
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.requests import request_code, request_id_from_code
from gpufleet.wire.requests import RequestCreate

MAX_FIELDS = 50
_CHAT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # wire/chatops.py ChatId


class PayloadError(InvalidInput):
    default_code = "invalid_chat_payload"


@dataclass(frozen=True)
class SlashCommand:
    command: str  # `/gpu`
    text: str  # what follows it, for `domain.chatops.commands.parse`
    user_id: str
    user_name: str
    team_id: str
    channel_id: str
    response_url: str
    trigger_id: str


@dataclass(frozen=True)
class Interaction:
    type: str  # `block_actions` for a button
    user_id: str
    team_id: str
    channel_id: str | None
    message_ts: str | None  # the message to update after a decision
    response_url: str | None
    action_ids: tuple[str, ...]

    def approval(self) -> ApprovalAction | None:
        """The approval button pressed, if the first action is one."""
        return parse_action_id(self.action_ids[0]) if self.action_ids else None


def _form(body: VerifiedBody) -> dict[str, str]:
    try:
        pairs = parse_qsl(body.raw.decode("utf-8"), keep_blank_values=True,
                          strict_parsing=bool(body.raw), max_num_fields=MAX_FIELDS)
    except ValueError as error:
        raise PayloadError(f"the body is not a form: {error}") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if "\x00" in name or "\x00" in value:  # PostgreSQL cannot store one (wire/nul_text.py)
            raise PayloadError(f"the form's '{name[:40]}' holds a NUL character")
        if name in form:
            raise PayloadError(f"the form gives '{name[:40]}' twice")
        form[name] = value
    return form


def _required(form: dict[str, str], name: str, *, blank: bool = False) -> str:
    value = form.get(name)
    if value is None or (not blank and not value):
        raise PayloadError(f"the slash command has no '{name}'")
    return value


def parse_slash_command(body: VerifiedBody) -> SlashCommand:
    form = _form(body)
    return SlashCommand(
        command=_required(form, "command"), text=_required(form, "text", blank=True),
        user_id=_chat_id(_required(form, "user_id"), "user_id"),
        user_name=form.get("user_name", ""),
        team_id=_chat_id(_required(form, "team_id"), "team_id"),
        channel_id=_chat_id(_required(form, "channel_id"), "channel_id"),
        response_url=form.get("response_url", ""), trigger_id=form.get("trigger_id", ""))


def parse_interaction(body: VerifiedBody) -> Interaction:
    form = _form(body)
    if "payload" not in form:
        raise PayloadError("the interactivity request has no 'payload'")
    try:
        payload = json.loads(form["payload"])
    except ValueError:
        raise PayloadError("the interactivity payload is not JSON") from None
    if not isinstance(payload, dict):
        raise PayloadError("the interactivity payload is not a JSON object")
    user, team = _object(payload, "user"), _object(payload, "team")
    channel, container = payload.get("channel"), payload.get("container")
    actions = payload.get("actions") or []
    if not isinstance(actions, list) or not all(
            isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions):
        raise PayloadError("the interactivity payload's 'actions' are not a list of actions")
    return Interaction(
        type=_text(payload, "type"), user_id=_chat_id(_text(user, "id"), "user.id"),
        team_id=_chat_id(_text(team, "id"), "team.id"),
        channel_id=_optional_text(channel, "id"),
        message_ts=_optional_text(container, "message_ts"),
        response_url=_optional_text(payload, "response_url"),
        action_ids=tuple(a["action_id"] for a in actions))


def _object(payload: dict, name: str) -> dict:
    value = payload.get(name)
    if not isinstance(value, dict):
        raise PayloadError(f"the interactivity payload has no '{name}' object")
    return value


def _chat_id(value: str, name: str) -> str:
    """A workspace, user or channel id as Slack and Mattermost write them (`T0123ABC`, 26
    lowercase letters and digits), short enough for the columns that keep them."""
    if not _CHAT_ID.fullmatch(value):
        raise PayloadError(f"'{name}' is not a chat id (letters, digits, '.', '_', '-'; at "
                           "most 63 characters)")
    return value


def _text(payload: dict, name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise PayloadError(f"the interactivity payload has no '{name}'")
    return value


def _optional_text(payload: object, name: str) -> str | None:
    if not isinstance(payload, dict):
        return None
    value = payload.get(name)
    return value if isinstance(value, str) and value else None


def parse_action_id(action_id: str) -> ApprovalAction | None:
    """`approve:GR-1042` → an ApprovalAction; None for any other action id."""
    decision, _, code = action_id.partition(":")
    request_id = request_id_from_code(code) if decision in DECISIONS else None
    return None if request_id is None else ApprovalAction(decision, request_code(request_id))


def request_create(command: RequestCommand) -> RequestCreate:
    """`/gpu request …` as the API's request body (what `gpufleet request create` sends)."""
    return RequestCreate(
        project=command.project, count=command.count, models=list(command.models) or None,
        mig_profile=command.mig_profile, fraction=command.fraction,
        same_node=command.same_node, nvlink=command.nvlink, environment=command.environment,
        duration_hours=command.duration_hours, reason=command.reason)
