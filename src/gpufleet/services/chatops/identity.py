"""Which gpufleet user a chat user is (docs/chatops.md, "Identity").

A chat user (a Slack or Mattermost user in one workspace) acts as the gpufleet user it is
linked to: with that user's role and projects, exactly as that user's own token would, so
every authorisation stays where it is (the services' own checks). A link is made three ways:

- by e-mail: Slack's directory gives the chat user's e-mail (a bot token with
  `users:read.email`), and exactly one gpufleet user has it, compared case-insensitively;
- by a one-time code: `/gpu link` answers a code only that chat user sees; the person runs
  `gpufleet chatops link CODE` with their own token, proving both sides. Only the code's
  SHA-256 is stored (it is random, so a plain hash suffices, as for API tokens);
- by an administrator, by hand.

Every link and unlink is audited (subject kind `chat_identity`, subject `slack:T…/U…`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import Conflict, InvalidInput, NotFound
from gpufleet.services.access import audit
from gpufleet.services.access.people import get_user
from gpufleet.services.access.principal import Principal
from gpufleet.services.access.tokens import hash_token
from gpufleet.services.lookup import not_found
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import ChatIdentity, ChatLinkCode, Project, ProjectMember, User
from gpufleet.wire.base import Page
from gpufleet.wire.chatops import ChatIdentityLink, ChatIdentityView

LINK_CODE_TTL = timedelta(minutes=15)
LINKED_BY_EMAIL = "email"
LINKED_BY_CODE = "link-code"
EMAIL_LINKER = "system:chatops"  # the actor of a link made from the chat directory's e-mail
_BY_ID = SortSpec((ChatIdentity.id,))


@dataclass(frozen=True)
class ChatUser:
    """One person in one chat workspace: what a slash command or a button press names."""

    platform: str  # `slack` or `mattermost`
    team_id: str
    chat_user_id: str

    @property
    def subject(self) -> str:
        """How the audit log names this chat user: `slack:T0123/U0456`."""
        return f"{self.platform}:{self.team_id}/{self.chat_user_id}"


def _identity(session: Session, who: ChatUser) -> ChatIdentity | None:
    return session.scalar(select(ChatIdentity).where(
        ChatIdentity.platform == who.platform, ChatIdentity.team_id == who.team_id,
        ChatIdentity.chat_user_id == who.chat_user_id))


def principal_of(session: Session, who: ChatUser) -> Principal | None:
    """The linked user as a caller (their role and projects, as `tokens.principal_for`
    builds them from a token), or None for a chat user nobody linked. The actor is the
    user's own (`user:alice`): the audit log and the own-request rules see one person
    whichever door they came in by; `token_name` says the door."""
    identity = _identity(session, who)
    if identity is None:
        return None
    user = session.get(User, identity.user_id)
    if user is None:
        return None
    projects = frozenset(session.scalars(
        select(Project.name).join(ProjectMember, ProjectMember.project_id == Project.id)
        .where(ProjectMember.user_id == user.id)))
    return Principal(role=Role(user.role), token_name=f"chat:{who.platform}",
                     user_id=user.id, user_name=user.name, project_names=projects)


def view(identity: ChatIdentity, user_name: str) -> ChatIdentityView:
    return ChatIdentityView(platform=identity.platform, team_id=identity.team_id,
                            chat_user_id=identity.chat_user_id, user=user_name,
                            linked_by=identity.linked_by, linked_at=identity.linked_at)


def _link(session: Session, who: ChatUser, user: User, *, linked_by: str, actor: str,
          now: datetime) -> ChatIdentityView:
    """Link `who` to `user` (re-linking a chat user linked to someone else), audited."""
    identity = _identity(session, who)
    previous = None
    if identity is None:
        identity = ChatIdentity(platform=who.platform, team_id=who.team_id,
                                chat_user_id=who.chat_user_id, user_id=user.id,
                                linked_by=linked_by, linked_at=now)
        session.add(identity)
    else:
        previous = session.scalar(select(User.name).where(User.id == identity.user_id))
        identity.user_id, identity.linked_by, identity.linked_at = user.id, linked_by, now
    try:
        session.flush()
    except IntegrityError:  # the same chat user linked at the same moment elsewhere
        raise Conflict(f"chat user {who.subject} was linked meanwhile; try again",
                       code="chat_identity_race") from None
    audit.record(session, at=now, actor=actor, action="chat_identity.linked",
                 subject_kind="chat_identity", subject=who.subject, user=user.name,
                 linked_by=linked_by, previous_user=previous)
    return view(identity, user.name)


# --- by e-mail ------------------------------------------------------------------------------
def link_by_email(session: Session, who: ChatUser, email: str,
                  now: datetime) -> Principal | None:
    """Link `who` to the one user whose e-mail is `email` (any case); None when no user or
    more than one has it — an e-mail shared by two accounts proves neither."""
    matches = session.scalars(select(User).where(
        func.lower(User.email) == email.strip().lower()).limit(2)).all()
    if len(matches) != 1 or _identity(session, who) is not None:
        return None
    _link(session, who, matches[0], linked_by=LINKED_BY_EMAIL, actor=EMAIL_LINKER, now=now)
    return principal_of(session, who)


# --- by a one-time code ---------------------------------------------------------------------
def issue_link_code(session: Session, who: ChatUser, now: datetime) -> str:
    """A new one-time code for `who`, good for LINK_CODE_TTL; only its hash is kept."""
    raw = secrets.token_urlsafe(12)  # 96 random bits, 16 characters to type
    session.add(ChatLinkCode(code_hash=hash_token(raw), platform=who.platform,
                             team_id=who.team_id, chat_user_id=who.chat_user_id,
                             created_at=now, expires_at=now + LINK_CODE_TTL))
    return raw


def redeem_link_code(session: Session, principal: Principal, raw: str,
                     now: datetime) -> ChatIdentityView:
    """Link the chat user the code was given to, to the caller's own user. A code works
    once, and not after it expired; a token without a user links nobody."""
    principal.require(Action.LINK_CHAT_IDENTITY)
    if principal.user_id is None:
        raise InvalidInput("this token belongs to no user; link with a person's own token",
                           code="token_without_user")
    code = session.scalar(select(ChatLinkCode).where(
        ChatLinkCode.code_hash == hash_token(raw)).with_for_update())
    if code is None:
        raise NotFound("no such link code; ask for a new one with `/gpu link`",
                       code="link_code_not_found")
    if code.used_at is not None:
        raise Conflict("this link code was already used; ask for a new one with `/gpu link`",
                       code="link_code_used")
    if code.expires_at <= now:
        raise Conflict("this link code has expired; ask for a new one with `/gpu link`",
                       code="link_code_expired")
    code.used_at = now
    user = session.get(User, principal.user_id)
    if user is None:
        raise not_found("user", principal.user_name or principal.user_id)
    who = ChatUser(code.platform, code.team_id, code.chat_user_id)
    return _link(session, who, user, linked_by=LINKED_BY_CODE, actor=principal.actor, now=now)


# --- by an administrator --------------------------------------------------------------------
def list_identities(session: Session, principal: Principal, cursor: str | None,
                    limit: int) -> Page[ChatIdentityView]:
    principal.require(Action.READ_CHAT_IDENTITIES)
    query = select(ChatIdentity, User.name).join(User, User.id == ChatIdentity.user_id)
    rows, next_cursor = keyset_page(session, query, _BY_ID, cursor, limit)
    return Page[ChatIdentityView](items=[view(identity, name) for identity, name in rows],
                                  next_cursor=next_cursor)


def admin_link(session: Session, principal: Principal, body: ChatIdentityLink,
               now: datetime) -> ChatIdentityView:
    principal.require(Action.MANAGE_CHAT_IDENTITIES)
    user = get_user(session, body.user)
    who = ChatUser(body.platform.value, body.team_id, body.chat_user_id)
    return _link(session, who, user, linked_by=principal.actor, actor=principal.actor, now=now)


def unlink(session: Session, principal: Principal, who: ChatUser,
           now: datetime) -> ChatIdentityView:
    principal.require(Action.MANAGE_CHAT_IDENTITIES)
    identity = _identity(session, who)
    if identity is None:
        raise not_found("chat_identity", who.subject, label="chat user")
    user_name = session.scalar(select(User.name).where(User.id == identity.user_id)) or "?"
    shown = view(identity, user_name)
    session.delete(identity)
    audit.record(session, at=now, actor=principal.actor, action="chat_identity.unlinked",
                 subject_kind="chat_identity", subject=who.subject, user=user_name)
    return shown
