"""Chat-ops over HTTP (docs/chatops.md): Slack's slash command and interactivity request
URLs, Mattermost's slash command, and the bearer-token routes that link chat users.

The platform routes verify their caller before reading anything — Slack's signature
(`RequestVerifier`), Mattermost's token — and answer 404 while the server has no secret for
that platform, 401 for a refused caller, 413 for a body larger than any chat request.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from gpufleet.api.chatops import dispatch, mattermost, response_url
from gpufleet.api.chatops.paths import (
    MATTERMOST_COMMANDS_PATH,
    SLACK_COMMANDS_PATH,
    SLACK_INTERACTIONS_PATH,
)
from gpufleet.api.chatops.payloads import parse_interaction, parse_slash_command
from gpufleet.api.chatops.signature import RequestVerifier, VerifiedBody
from gpufleet.api.deps import PageRequest, page_request, principal, services
from gpufleet.api.errors import error_response
from gpufleet.domain.errors import NotFound, Unauthenticated
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.chatops.identity import ChatUser
from gpufleet.wire.base import Page
from gpufleet.wire.chatops import (
    ChatId,
    ChatIdentityLink,
    ChatIdentityView,
    ChatPlatform,
    LinkCodeRedeem,
)

router = APIRouter(tags=["chatops"])


def _form_body(fields: list[str], required: list[str], about: str) -> dict:
    """The OpenAPI request body of a chat platform's form post (read raw, not by FastAPI)."""
    return {"requestBody": {"required": True, "description": about, "content": {
        "application/x-www-form-urlencoded": {"schema": {
            "type": "object", "required": required,
            "properties": {name: {"type": "string"} for name in fields}}}}}}


_SLASH_FIELDS = ["command", "text", "user_id", "user_name", "team_id", "channel_id",
                 "response_url", "trigger_id"]
_SLASH_REQUIRED = ["command", "text", "user_id", "team_id", "channel_id"]
SLACK_COMMAND_BODY = _form_body(
    _SLASH_FIELDS, _SLASH_REQUIRED, "Slack's slash command form, signed with the app's "
    "signing secret (`X-Slack-Signature`, `X-Slack-Request-Timestamp`).")
SLACK_INTERACTION_BODY = _form_body(
    ["payload"], ["payload"], "Slack's interactivity form: `payload` is the JSON of the "
    "button press; signed as slash commands are.")
MATTERMOST_COMMAND_BODY = _form_body(
    [*_SLASH_FIELDS, "token"], [*_SLASH_REQUIRED, "token"],
    "Mattermost's slash command form; `token` is the command's token.")


def _not_configured(platform: str) -> NotFound:
    return NotFound(f"chat-ops for {platform} is not configured on this server",
                    code="chatops_not_configured", details={"platform": platform})


async def _slack_body(request: Request, gf: Gpufleet) -> VerifiedBody | JSONResponse:
    secret = gf.settings.slack_signing_secret
    if secret is None or not secret.get_secret_value().strip():
        raise _not_configured("slack")
    check = RequestVerifier(secret.get_secret_value(), gf.clock).check(
        request.headers, await request.body())
    if not check.accepted:
        return error_response(check.http_status, f"slack_{check.verdict.value}",
                              check.message)
    return check.body


@router.post(SLACK_COMMANDS_PATH, openapi_extra=SLACK_COMMAND_BODY)
async def slack_command(request: Request, gf: Gpufleet = Depends(services)):
    """Slack's slash command request URL (`/gpu …`): signature first, then the command as
    the chat user's linked user; the reply is the Block Kit message itself."""
    body = await _slack_body(request, gf)
    if isinstance(body, JSONResponse):
        return body
    slash = parse_slash_command(body)
    return JSONResponse(await run_in_threadpool(
        dispatch.run_slash_command, gf, ChatPlatform.SLACK.value, slash))


@router.post(SLACK_INTERACTIONS_PATH, openapi_extra=SLACK_INTERACTION_BODY)
async def slack_interaction(request: Request, gf: Gpufleet = Depends(services)):
    """Slack's interactivity request URL (Approve / Reject): signature first; the answer
    goes to the payload's `response_url` once this request is acknowledged."""
    body = await _slack_body(request, gf)
    if isinstance(body, JSONResponse):
        return body
    interaction = parse_interaction(body)
    reply, replaces = await run_in_threadpool(dispatch.run_approval, gf, interaction)
    if interaction.response_url is None:  # nowhere to answer: the HTTP reply is all
        return JSONResponse(reply)
    return Response(status_code=200, background=BackgroundTask(
        response_url.send, interaction.response_url, reply, replace_original=replaces))


@router.post(MATTERMOST_COMMANDS_PATH, openapi_extra=MATTERMOST_COMMAND_BODY)
async def mattermost_command(request: Request, gf: Gpufleet = Depends(services)):
    """Mattermost's slash command URL: its token first, then the same commands; the reply
    is `{response_type, text}` (Mattermost shows the text)."""
    token = gf.settings.mattermost_command_token
    if token is None or not token.get_secret_value().strip():
        raise _not_configured("mattermost")
    body = mattermost.check_token(token.get_secret_value(), await request.body())
    if body is None:
        raise Unauthenticated("the Mattermost command token is missing or wrong",
                              code="mattermost_bad_token")
    slash = parse_slash_command(body)
    reply = await run_in_threadpool(
        dispatch.run_slash_command, gf, ChatPlatform.MATTERMOST.value, slash)
    return JSONResponse({"response_type": reply["response_type"], "text": reply["text"]})


# --- linking, with a bearer token -------------------------------------------------------------
@router.post("/api/v1/chatops/links", response_model=ChatIdentityView, status_code=201)
def redeem_link_code(body: LinkCodeRedeem, p: Principal = Depends(principal),
                     gf: Gpufleet = Depends(services)):
    """`gpufleet chatops link CODE`: link the chat user `/gpu link` gave the code to, to
    the caller's own user. A code works once, for 15 minutes."""
    return gf.chatops.redeem_link_code(p, body.code)


@router.get("/api/v1/chatops/identities", response_model=Page[ChatIdentityView])
def list_identities(page: PageRequest = Depends(page_request), p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Every linked chat user and the gpufleet user it acts as (operators)."""
    return gf.chatops.list_identities(p, page.cursor, page.limit)


@router.post("/api/v1/chatops/identities", response_model=ChatIdentityView, status_code=201)
def link_identity(body: ChatIdentityLink, p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    """Link a chat user to a gpufleet user by hand (administrators); audited."""
    return gf.chatops.link(p, body)


@router.delete("/api/v1/chatops/identities/{platform}/{team_id}/{chat_user_id}",
               response_model=ChatIdentityView)
def unlink_identity(platform: ChatPlatform, team_id: ChatId = Path(),
                    chat_user_id: ChatId = Path(), p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Unlink a chat user (administrators); it can then only be told how to link."""
    return gf.chatops.unlink(p, ChatUser(platform.value, team_id, chat_user_id))
