"""Block Kit replies to `/gpu` and the approval message, from the API's JSON.

Each builder takes what the matching API route returns (`GET /api/v1/requests/{code}`,
`…/why`, the listing's `items`) as JSON-shaped dicts and returns a whole Slack message:
`response_type` (ephemeral: only the caller sees it; in_channel: everyone), a plain `text`
fallback (what notifications and Mattermost, which has no Block Kit, show) and `blocks`.
Everything a user typed (a reason, a project) is escaped, so `<!channel>` or a link cannot be
smuggled into a message; every text is clipped to Slack's limits and a list to the blocks a
message may hold. Times use Slack's `<!date^…>` so each reader sees their own zone, with UTC
as the fallback text.

Pure, in the domain (docs/design.md, "Layers"): the API answers slash commands with these
messages and the notifier in services posts the approval message and the thread's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpufleet.domain.chatops.approvals import APPROVE, REJECT, ApprovalAction
from gpufleet.domain.chatops.commands import USAGE, VERBS, Unparsed
from gpufleet.text_limits import clip

MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3000
MAX_HEADER_CHARS = 150
MAX_FIELD_CHARS = 2000
MAX_FIELDS = 10
MAX_BUTTON_CHARS = 75
MAX_FALLBACK_CHARS = 3000
MINE_SHOWN = 20  # requests listed in `mine`; the rest are counted, with the CLI to see them

EPHEMERAL = "ephemeral"
IN_CHANNEL = "in_channel"
# Only the caller sees answers about their own requests; a new request and a release are
# news for the channel the command was typed in.
RESPONSE_TYPE = {"help": EPHEMERAL, "status": EPHEMERAL, "why": EPHEMERAL, "mine": EPHEMERAL,
                 "idle": EPHEMERAL, "link": EPHEMERAL, "request": IN_CHANNEL, "release": IN_CHANNEL}
Message = dict[str, Any]
Block = dict[str, Any]

_STATE_EMOJI = {"pending": ":hourglass_flowing_sand:", "approved": ":white_check_mark:",
                "active": ":large_green_circle:", "released": ":white_circle:",
                "expired": ":white_circle:", "rejected": ":no_entry:",
                "cancelled": ":white_circle:"}


# --- text ------------------------------------------------------------------------------------
def escape(text: str) -> str:
    """User text made inert in mrkdwn: Slack reads `<…>` as links and mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def when(iso: str | None) -> str:
    """`<!date^…|2026-01-01 12:00 UTC>`: the reader's zone in Slack, UTC as fallback."""
    if not iso:
        return "—"
    moment = datetime.fromisoformat(iso)
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def flavour(request: dict[str, Any]) -> str:
    """`8 × H100-80GB`, `4 × H100-80GB 1g.10gb`, `2 × any model shared 0.5`."""
    models = ", ".join(request["models"]) if request.get("models") else "any model"
    if request["kind"] == "mig":
        models += f" {request['mig_profile']}"
    elif request["kind"] == "shared":
        models += f" shared {request['milli'] / 1000:g}"
    return f"{request['count']} × {models}"


def _duration(request: dict[str, Any]) -> str:
    if request.get("ends_at"):
        return f"until {when(request['ends_at'])}"
    seconds = request.get("duration_s")
    if not seconds:
        return "open-ended"
    return f"{seconds // 86400} d" if seconds % 86400 == 0 else f"{seconds / 3600:g} h"


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, MAX_SECTION_CHARS)}}


def _header(text: str) -> Block:
    return {"type": "header",
            "text": {"type": "plain_text", "text": clip(text, MAX_HEADER_CHARS)}}


def _fields(pairs: dict[str, str]) -> Block:
    return {"type": "section", "fields": [
        {"type": "mrkdwn", "text": clip(f"*{name}*\n{value}", MAX_FIELD_CHARS)}
        for name, value in list(pairs.items())[:MAX_FIELDS]]}


def _context(text: str) -> Block:
    return {"type": "context",
            "elements": [{"type": "mrkdwn", "text": clip(text, MAX_SECTION_CHARS)}]}


def message(verb_or_type: str, fallback: str, blocks: list[Block]) -> Message:
    """A whole reply; `verb_or_type` is a command's verb or EPHEMERAL / IN_CHANNEL. The
    fallback is plain words, escaped too: Slack reads a message's `text` as mrkdwn."""
    response_type = RESPONSE_TYPE.get(verb_or_type, verb_or_type)
    return {"response_type": response_type,
            "text": clip(escape(fallback), MAX_FALLBACK_CHARS),
            "blocks": blocks[:MAX_BLOCKS]}


# --- replies ---------------------------------------------------------------------------------
_HELP = {
    "request": "Ask for GPUs, as `gpufleet request create` does.",
    "status": "A request's state, units and exports.",
    "why": "Why a request waits: each admission rule's verdict.",
    "release": "Give a request's units back.",
    "mine": "Your projects' requests, newest first.",
    "idle": "Your allocations' GPUs that are doing nothing.",
    "link": "Link your chat user to your gpufleet user (a one-time code).",
    "help": "This help, or one command's.",
}


def help_reply(topic: str | None = None) -> Message:
    verbs = [topic] if topic else list(VERBS)
    lines = [f"`{USAGE[verb]}`\n{_HELP[verb]}" for verb in verbs]
    return message("help", "\n".join(USAGE[v] for v in verbs),
                   [_header(f"/gpu {topic}" if topic else "/gpu commands"),
                    _section("\n\n".join(lines))])


def unparsed_reply(unparsed: Unparsed) -> Message:
    text = f":warning: {escape(unparsed.problem)}\nUsage: `{unparsed.usage}`"
    return message(EPHEMERAL, f"{unparsed.problem}. Usage: {unparsed.usage}", [_section(text)])


def error_reply(problem: str) -> Message:
    """What the server refused, in its own words (only the caller sees it)."""
    return message(EPHEMERAL, problem, [_section(f":warning: {escape(problem)}")])


def _about(request: dict[str, Any]) -> dict[str, str]:
    about = {"State": f"{_STATE_EMOJI.get(request['state'], '')} {request['state']}".strip(),
             "Project": escape(request["project"]), "Asks for": escape(flavour(request)),
             "For": _duration(request),
             "Requested by": escape(request["requested_by"]),
             "Created": when(request["created_at"])}
    if request.get("decided_by"):
        about["Decided by"] = f"{escape(request['decided_by'])}, {when(request['decided_at'])}"
    if request.get("wait_code") and request["state"] in ("pending", "approved"):
        about["Waiting on"] = escape(f"{request['wait_code']}: {request['wait_message']}")
    return about


def _reason(request: dict[str, Any]) -> list[Block]:
    reason = request.get("justification")
    return [_context(f"Reason: {escape(reason)}")] if reason else []


def status_reply(request: dict[str, Any], verb: str = "status") -> Message:
    """A request's state (`status`, and the answer to `request` and `release`)."""
    blocks = [_header(f"{request['code']} · {request['state']}"), _fields(_about(request)),
              *_reason(request)]
    if request.get("exports"):
        lines = "\n".join(f"export {name}={value}" for name, value in request["exports"].items())
        blocks.append(_section(f"```{escape(lines)}```"))
    return message(verb, f"{request['code']} {request['state']}: {flavour(request)} for "
                         f"{request['project']}", blocks)


def mine_reply(requests: list[dict[str, Any]], total: int | None = None) -> Message:
    """A page of the caller's requests (the listing's `items`, newest first)."""
    if not requests:
        return message("mine", "No requests yet.", [_section(
            "No requests in your projects yet. Ask with "
            "`/gpu request 1 H100-80GB --project NAME --reason \"…\"`.")])
    shown = requests[:MINE_SHOWN]
    blocks = [_header("Your requests")] + [
        _section(f"{_STATE_EMOJI.get(r['state'], '')} *{r['code']}* {r['state']} · "
                 f"{escape(flavour(r))} · {escape(r['project'])} · {when(r['created_at'])}")
        for r in shown]
    more = (total if total is not None else len(requests)) - len(shown)
    if more > 0:
        blocks.append(_context(f"and {more} more: `gpufleet request ls --all`"))
    return message("mine", f"{len(shown)} of your requests", blocks)


def _gib(memory_bytes: float | None) -> str:
    return "memory unknown" if memory_bytes is None else f"{memory_bytes / 2**30:.1f} GiB held"


def idle_reply(view: dict[str, Any]) -> Message:
    """`GET /api/v1/telemetry/idle` for the caller's projects: each idle unit, since when."""
    window = f"{view['window_hours']:g} h"
    if not view["items"]:
        text = f"None of your allocated GPUs has been idle for the last {window}."
        return message("idle", text, [_section(f":sparkles: {text}")])
    shown = view["items"][:MINE_SHOWN]
    blocks = [_header(f"Idle for {window} or more")] + [
        _section(f"*{escape(i['allocation'])}* · {escape(i['project'])} · "
                 f"{escape(i['model'])}{' ' + escape(i['mig_profile']) if i['mig_profile'] else ''}"
                 f" on {escape(i['node'])} · {i['state'].replace('_', '-')} since "
                 f"{when(i['idle_since'])} · {_gib(i['memory_held_bytes'])}")
        for i in shown]
    more = len(view["items"]) - len(shown) + (1 if view.get("next_cursor") else 0)
    footer = (f"activity below {view['activity_threshold_percent']:g} % for the whole window"
              + ("; more: `gpufleet idle`" if more > 0 else ""))
    return message("idle", f"{len(shown)} idle allocations", [*blocks, _context(footer)])


_OUTCOME_EMOJI = {"accept": ":white_check_mark:", "reject": ":x:", "wait": ":hourglass:"}


def why_reply(why: dict[str, Any]) -> Message:
    """`GET /api/v1/requests/{code}/why`: the summary, then each rule's verdict."""
    verdicts = [f"{_OUTCOME_EMOJI.get(v['outcome'], '•')} *{escape(v['rule'])}* "
                f"{escape(v['message'])}" for v in why["verdicts"]]
    blocks = [_header(f"Why {why['code']} is {why['state']}"), _section(escape(why["summary"]))]
    if verdicts:
        blocks.append(_section("\n".join(verdicts)))
    if why.get("queue_position"):
        blocks.append(_context(f"Queue position {why['queue_position']} of "
                               f"{why['queue_length']} {why['state']}"))
    return message("why", f"{why['code']}: {why['summary']}", blocks)


def _button(text: str, action: ApprovalAction, style: str) -> Block:
    return {"type": "button", "text": {"type": "plain_text", "text": text[:MAX_BUTTON_CHARS]},
            "action_id": action.action_id, "value": action.code, "style": style}


def approval_message(request: dict[str, Any]) -> Message:
    """Posted in the approvals channel for a request that needs an operator."""
    code = request["code"]
    buttons = {"type": "actions", "block_id": f"decide:{code}", "elements": [
        _button("Approve", ApprovalAction(APPROVE, code), "primary"),
        _button("Reject", ApprovalAction(REJECT, code), "danger")]}
    return message(IN_CHANNEL, f"{code} needs an operator: {flavour(request)} for "
                               f"{request['project']}",
                   [_header(f"{code} needs an operator"), _fields(_about(request)),
                    *_reason(request), buttons])


def decided_message(request: dict[str, Any], decided_by: str) -> Message:
    """The approval message once decided: the buttons give way to who decided."""
    code, state = request["code"], request["state"]
    return message(IN_CHANNEL, f"{code} {state} by {decided_by}",
                   [_header(f"{code} · {state}"), _fields(_about(request)), *_reason(request),
                    _context(f"{_STATE_EMOJI.get(state, '')} {escape(state)} by "
                             f"{escape(decided_by)}")])


# --- the requester's thread (services/chatops/notifier.py) -------------------------------------
def mention(chat_user_id: str | None) -> str:
    """`<@U0123>` for a Slack user id, or nothing: an id that is not one (letters and digits
    only) is never written into a message, where it could be markup."""
    if chat_user_id and chat_user_id.isascii() and chat_user_id.isalnum():
        return f"<@{chat_user_id}> "
    return ""


def actor_name(actor: str) -> str:
    """Who an event's actor is, in words: `user:olga` → olga, `system:lifecycle` → gpufleet."""
    kind, _, name = actor.partition(":")
    if kind == "user" and name:
        return name
    if kind == "system" or actor == "system":
        return "gpufleet"
    if kind == "policy":
        return f"the project's {name} policy" if name else "a policy"
    return actor


def thread_opener(request: dict[str, Any], requester: str | None) -> Message:
    """The first message in the requester's channel; what happens next is told in its
    thread."""
    code = request["code"]
    text = (f"{mention(requester)}*{code}*: {escape(flavour(request))} for "
            f"{escape(request['project'])} is *{request['state']}*. "
            "What happens to it is told in this thread.")
    return message(IN_CHANNEL, f"{code} {request['state']}: {flavour(request)} for "
                               f"{request['project']}",
                   [_section(text), _fields(_about(request)), *_reason(request)])


_THREAD_SAYS = {
    "request.approved": (":white_check_mark:", "was approved by {who}"),
    "request.rejected": (":no_entry:", "was rejected by {who}"),
    "request.cancelled": (":white_circle:", "was cancelled by {who}"),
    "request.activated": (":large_green_circle:", "is active"),
    "request.shrunk": (":scissors:", "was shrunk by {who}"),
    "request.released": (":white_circle:", "was released by {who}"),
    "request.expired": (":white_circle:", "expired"),
    "request.ending_warned": (":hourglass:", "is about to end"),
    "reclaim.warned": (":warning:", "is idle"),
}
THREAD_EVENTS = frozenset(_THREAD_SAYS)


def thread_reply(event_type: str, actor: str, reason: str | None, request: dict[str, Any],
                 requester: str | None) -> Message:
    """A reply in the requester's thread for one event: what happened, by whom, why (an
    idle or ending warning's reason says what will happen and how to keep it); an active
    request's exports (what a job sets to use its units)."""
    code = request["code"]
    emoji, said = _THREAD_SAYS[event_type]
    said = said.format(who=actor_name(actor))
    blocks = [_section(f"{emoji} {mention(requester)}*{code}* {escape(said)}"
                       + (f": {escape(reason)}" if reason else "."))]
    if event_type == "request.activated" and request.get("exports"):
        lines = "\n".join(f"export {name}={value}" for name, value in request["exports"].items())
        blocks.append(_section(f"Use it with:\n```{escape(lines)}```"))
    return message(IN_CHANNEL, f"{code} {said}" + (f": {reason}" if reason else ""), blocks)


# --- identity (docs/chatops.md, "Identity") --------------------------------------------------
def link_code_reply(code: str, minutes: int) -> Message:
    """`/gpu link`: a one-time code only the caller sees, and the command that uses it."""
    command = f"gpufleet chatops link {code}"
    text = (f"Your one-time link code is `{escape(code)}` (good for {minutes} minutes, once). "
            f"In a terminal where `gpufleet` is signed in as you, run:\n`{escape(command)}`")
    return message("link", f"Run: {command} (the code is good for {minutes} minutes, once)",
                   [_section(f":link: {text}")])


def not_linked_reply() -> Message:
    """What an unlinked chat user is told, whatever they typed (help and link aside)."""
    text = ("Your chat user is not linked to a gpufleet user yet, so no command can run for "
            "you. Type `/gpu link` for a one-time code and run the command it shows, or ask "
            "an administrator to link you (`gpufleet chatops identities link`).")
    return message(EPHEMERAL, text, [_section(f":lock: {text}")])
