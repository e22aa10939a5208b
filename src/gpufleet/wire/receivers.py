"""Receivers, their delivery log and the users' inbox on the wire (docs/operations.md,
"Receivers").

A receiver's `config` is checked against its kind's schema below; secrets in it (a webhook
secret, a Slack token or incoming-webhook URL, an SMTP password) are written, never read
back: a view shows `"set"` in their place.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    field_validator,
    model_validator,
)

from gpufleet.domain.operations.notifications import Severity
from gpufleet.wire.base import Name, StrictModel, View


class ReceiverKind(StrEnum):
    WEBHOOK = "webhook"
    SLACK_WEBHOOK = "slack_webhook"
    SLACK = "slack"
    EMAIL = "email"
    ALERTMANAGER = "alertmanager"
    INBOX = "inbox"


# What a view shows instead of a secret that is set.
SECRET_SET = "set"

_HTTP_URL = TypeAdapter(AnyHttpUrl)


def _http_url(value: str) -> str:
    """Checked as an http(s) URL, kept as typed (pydantic would add a trailing slash)."""
    _HTTP_URL.validate_python(value)
    return value


Url = Annotated[str, StringConstraints(max_length=2000), AfterValidator(_http_url),
                Field(description="http:// or https:// URL")]
Email = Annotated[str, StringConstraints(min_length=3, max_length=254,
                                         pattern=r"^[^@\s<>]+@[^@\s<>]+$")]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    SECRETS: ClassVar[frozenset[str]] = frozenset()


class WebhookConfig(_Config):
    """POSTs the notification as JSON, signed when `secret` is set."""

    url: Url
    secret: str | None = Field(default=None, min_length=16, max_length=256, description=(
        "HMAC-SHA256 key of X-Gpufleet-Signature; at least 16 characters"))
    SECRETS = frozenset({"secret"})


class SlackWebhookConfig(_Config):
    """A Slack incoming webhook: one channel, chosen when the webhook was made."""

    url: Url
    SECRETS = frozenset({"url"})  # whoever holds the URL can post to the channel


class SlackConfig(_Config):
    """The Slack Web API with a bot token: `channel` for the broadcast copy, owners by
    direct message (users.lookupByEmail with their gpufleet e-mail)."""

    token: str = Field(min_length=8, max_length=256, description="bot token, xoxb-…")
    channel: str | None = Field(default=None, min_length=1, max_length=80,
                                description="channel ID or #name for the broadcast copy")
    api_url: Url | None = Field(default=None, description=(
        "Slack's Web API base URL; default https://slack.com/api/ (a proxy or a test "
        "server otherwise)"))
    SECRETS = frozenset({"token"})


class EmailConfig(_Config):
    """SMTP: `to` for the broadcast copy, owners at their gpufleet e-mail."""

    host: str = Field(min_length=1, max_length=253)
    port: int = Field(default=25, ge=1, le=65535)
    from_address: Email = Field(alias="from", description="the From: address")
    to: list[Email] = Field(default_factory=list, max_length=50)
    starttls: bool = Field(default=False, description=(
        "upgrade to TLS before logging in or sending; the server's certificate is "
        "verified (the system's CAs, or `ca_file`) and must name `host`"))
    ca_file: str | None = Field(default=None, min_length=2, max_length=4096, pattern=r"^/",
                                description=(
        "absolute path, on the gpufleet server, of a PEM file of the CAs to trust for "
        "STARTTLS instead of the system's (a private CA); needs starttls"))
    username: str | None = Field(default=None, max_length=254)
    password: str | None = Field(default=None, max_length=254)
    SECRETS = frozenset({"password"})
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True,
                              populate_by_name=True)


class AlertmanagerConfig(_Config):
    """An Alertmanager: alert notifications become its alerts (API v2)."""

    url: Url = Field(description="its base URL, e.g. http://alertmanager:9093")


class InboxConfig(_Config):
    """Stored for the owner; read with `gpufleet notifications ls`."""


CONFIG_SCHEMAS: dict[ReceiverKind, type[_Config]] = {
    ReceiverKind.WEBHOOK: WebhookConfig,
    ReceiverKind.SLACK_WEBHOOK: SlackWebhookConfig,
    ReceiverKind.SLACK: SlackConfig,
    ReceiverKind.EMAIL: EmailConfig,
    ReceiverKind.ALERTMANAGER: AlertmanagerConfig,
    ReceiverKind.INBOX: InboxConfig,
}

KindFilter = Annotated[str, StringConstraints(min_length=1, max_length=63,
                                              pattern=r"^[a-z0-9_.*-]+$")]
MatcherText = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class ReceiverCreate(StrictModel):
    name: Name
    kind: ReceiverKind
    config: dict[str, Any] = Field(default_factory=dict, description=(
        "the kind's settings (docs/operations.md, \"Receivers\")"))
    matchers: list[MatcherText] = Field(default_factory=list, max_length=20, description=(
        "label matchers the broadcast copy requires, e.g. project=vision"))
    kinds: list[KindFilter] = Field(default_factory=list, max_length=20, description=(
        "notification kinds taken (globs, e.g. alert.*); none: every kind"))
    min_severity: Severity = Severity.INFO
    broadcast: bool | None = Field(default=None, description=(
        "send a copy to the receiver's own channel or list; default true, false for inbox"))
    tells_owners: bool | None = Field(default=None, description=(
        "also tell each owner a notification names, directly; default false, true for "
        "inbox"))

    @field_validator("kinds")
    @classmethod
    def _distinct(cls, kinds: list[str]) -> list[str]:
        return list(dict.fromkeys(kinds))


class ReceiverUpdate(StrictModel):
    """A change to a receiver: only the fields given change. Its kind and config do not
    (remove and add it again): a config holds secrets that are never read back, so a
    partial change of one could not be checked against what is stored."""

    enabled: bool | None = Field(default=None, description=(
        "false: nothing new is queued for it and what is queued is held, not sent, until "
        "it is enabled again"))
    matchers: list[MatcherText] | None = Field(default=None, max_length=20, description=(
        "label matchers the broadcast copy requires; [] for none"))
    kinds: list[KindFilter] | None = Field(default=None, max_length=20, description=(
        "notification kinds taken (globs); [] for every kind"))
    min_severity: Severity | None = None

    @field_validator("kinds")
    @classmethod
    def _distinct(cls, kinds: list[str] | None) -> list[str] | None:
        return None if kinds is None else list(dict.fromkeys(kinds))

    @model_validator(mode="after")
    def _something(self) -> ReceiverUpdate:
        if all(getattr(self, n) is None for n in type(self).model_fields):
            raise ValueError("nothing to change: give enabled, matchers, kinds or "
                             "min_severity")
        return self


class ReceiverView(View):
    name: str
    kind: ReceiverKind
    config: dict[str, Any]
    matchers: list[str]
    kinds: list[str]
    min_severity: Severity
    broadcast: bool
    tells_owners: bool
    enabled: bool
    created_by: str
    created_at: datetime
    pending: int = Field(description="messages queued and not yet delivered or abandoned")
    abandoned: int = Field(description="messages given up on")


class DeliveryView(View):
    """One attempt of the delivery log, newest first."""

    id: int
    at: datetime
    message_id: int
    attempt: int
    ok: bool
    outcome: str
    status: int | None = Field(description="the receiver's HTTP or SMTP status, if any")
    detail: str | None
    duration_ms: int
    recipient: str | None
    kind: str
    idempotency_key: str


class TestQueued(View):
    queued: int = Field(description="outbox messages queued (one per recipient)")
    idempotency_keys: list[str]


class NotificationView(View):
    """One message of the caller's inbox."""

    id: int
    at: datetime
    kind: str
    severity: Severity
    summary: str
    text: str
    labels: dict[str, str]
    delivered_at: datetime | None
