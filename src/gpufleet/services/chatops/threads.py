"""Where a request lives in chat (docs/chatops.md, "Where a request came from").

When `/gpu request` creates a request, the inbound side records its origin here — the
platform, workspace, requester and channel — in a `ChatThread` row. `thread_ts` and the
approval message's columns stay empty: the outbound side posts the thread's first message
and the approval message, and fills them. The row is written in the transaction right
after the request's own (the lifecycle commits a request, and grants an auto-approved one,
before it answers); between the two the request exists without an origin, and a crash
there loses only the chat thread, never the request.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from gpufleet.services.chatops.identity import ChatUser
from gpufleet.store.tables import ChatThread


def remember_origin(session: Session, request_id: int, who: ChatUser, channel_id: str | None,
                    now: datetime) -> ChatThread:
    """Record that `who` asked for request `request_id` in `channel_id`; idempotent (a
    request has one origin: a second call keeps the first)."""
    thread = session.get(ChatThread, request_id)
    if thread is None:
        thread = ChatThread(request_id=request_id, platform=who.platform, team_id=who.team_id,
                            requester_chat_user_id=who.chat_user_id, channel_id=channel_id,
                            created_at=now)
        session.add(thread)
    return thread
