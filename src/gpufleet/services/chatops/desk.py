"""Chat-ops' front door for the API: who a chat user is, link codes, identities, and the
record of what a chat user did (docs/chatops.md). One transaction per method, as in
`services/app.py`; the lifecycle's own methods do the work a command asks for."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.domain.errors import Conflict
from gpufleet.domain.requests import request_code
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.chatops import identity
from gpufleet.services.chatops.identity import ChatUser
from gpufleet.services.chatops.slack_directory import SlackDirectory
from gpufleet.services.chatops.threads import remember_origin
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.wire.base import Page
from gpufleet.wire.chatops import ChatIdentityLink, ChatIdentityView, ChatPlatform

CHAT_COMMAND = "chat.command"


class ChatOps:
    def __init__(self, store: StateStore, settings: Settings, clock: Clock,
                 directory: SlackDirectory | None = None):
        self.store = store
        self.settings = settings
        self.clock = clock
        self.directory = directory or SlackDirectory(settings)

    def principal_of(self, who: ChatUser) -> Principal | None:
        """The caller a chat user acts as; an unlinked Slack user is linked by e-mail
        first when Slack's directory gives one that exactly one user has. None: unlinked."""
        with self.store.read() as session:
            found = identity.principal_of(session, who)
        if found is not None or who.platform != ChatPlatform.SLACK.value:
            return found
        email = self.directory.email_of(who.chat_user_id)  # outside any transaction
        if email is None:
            return None
        try:
            with self.store.write() as session:
                return identity.link_by_email(session, who, email, self.clock.now())
        except Conflict:  # linked meanwhile by another command of theirs: read that link
            with self.store.read() as session:
                return identity.principal_of(session, who)

    def issue_link_code(self, who: ChatUser) -> str:
        with self.store.write() as session:
            return identity.issue_link_code(session, who, self.clock.now())

    def redeem_link_code(self, principal: Principal, code: str) -> ChatIdentityView:
        with self.store.write() as session:
            return identity.redeem_link_code(session, principal, code, self.clock.now())

    def list_identities(self, principal: Principal, cursor: str | None,
                        limit: int) -> Page[ChatIdentityView]:
        with self.store.read() as session:
            return identity.list_identities(session, principal, cursor, limit)

    def link(self, principal: Principal, body: ChatIdentityLink) -> ChatIdentityView:
        with self.store.write() as session:
            return identity.admin_link(session, principal, body, self.clock.now())

    def unlink(self, principal: Principal, who: ChatUser) -> ChatIdentityView:
        with self.store.write() as session:
            return identity.unlink(session, principal, who, self.clock.now())

    def record_command(self, principal: Principal, who: ChatUser, verb: str,
                       code: str) -> None:
        """After a chat command changed a request: audit that it came through chat (the
        lifecycle's own event names the user, `user:alice`, as any door would)."""
        with self.store.write() as session:
            _note(session, principal, who, verb, code, self.clock.now())

    def origin_writer(self, principal: Principal, who: ChatUser,
                      channel_id: str | None) -> Callable[[Session, int], None]:
        """For `Lifecycle.create_request(also=…)`: a new request's chat origin
        (`threads.remember_origin`) and its `chat.command` event, in the request's own
        transaction — the outbound side reads `request.created` and must find where to tell
        the requester (an auto-approved request is active before any later write)."""
        def write(session: Session, request_id: int) -> None:
            now = self.clock.now()
            remember_origin(session, request_id, who, channel_id, now)
            _note(session, principal, who, "request", request_code(request_id), now)
        return write


def _note(session: Session, principal: Principal, who: ChatUser, verb: str, code: str,
          now) -> None:
    audit.record(session, at=now, actor=principal.actor, action=CHAT_COMMAND,
                 subject_kind="request", subject=code, verb=verb, platform=who.platform,
                 team_id=who.team_id, chat_user_id=who.chat_user_id)
