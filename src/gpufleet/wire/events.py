"""The event schema, version 1, and event subscriptions (docs/operations.md, "Events").

An event is an audit event read as a fact others may act on: the audit log is the event
source, so every state change that is audited is an event, in the transaction that made
it, with no second write. The schema is stable: fields are only ever added; a change
that would break a reader bumps `schema`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from gpufleet.wire.base import Name, StrictModel, View

EVENT_SCHEMA_VERSION = 1


class EventSubject(View):
    """What the event is about: `kind` (request, pool, gpu, node, environment, project,
    token, user, …) and its `id` (a code, a name, a UUID)."""

    kind: str
    id: str


class Event(View):
    """One event. `type` is the audit action (`request.approved`); `data` what the change
    recorded; `labels` the unit labels that apply (docs/operations.md, "Labels")."""

    schema_: Literal[1] = Field(default=EVENT_SCHEMA_VERSION, alias="schema",
                                serialization_alias="schema")
    id: int
    type: str
    at: datetime
    actor: str
    subject: EventSubject
    reason: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)

    model_config = {"populate_by_name": True, "from_attributes": True}


class EventPage(View):
    """Events after the cursor, oldest first. `last_id`: the id to pass as `after` to read
    on (the last event returned, or the `after` given when none came): it never goes
    back, so a reader that always passes it misses nothing and sees nothing twice.
    `next_cursor`: `last_id` when more events are already waiting, else null."""

    items: list[Event]
    next_cursor: str | None = None
    last_id: int


TypeGlob = Annotated[str, StringConstraints(min_length=1, max_length=63)]
Condition = Annotated[str, StringConstraints(min_length=1, max_length=500)]
WebhookUrl = Annotated[str, StringConstraints(min_length=1, max_length=2000,
                                              pattern=r"^https?://[^\s]+$")]
Secret = Annotated[str, StringConstraints(min_length=16, max_length=255)]


class EventSubscriptionCreate(StrictModel):
    """A webhook that receives the events matching `types` and every `where` condition,
    signed with `secret` (docs/operations.md, "Subscriptions")."""

    name: Name
    url: WebhookUrl
    secret: Secret = Field(description="Signs every delivery (HMAC-SHA256); at least 16 "
                                       "characters. Never shown again.")
    types: list[TypeGlob] = Field(min_length=1, max_length=50,
                                  description="Event type globs: request.approved, request.*")
    where: list[Condition] = Field(default_factory=list, max_length=50,
                                   description="Conditions that must all hold: "
                                               "data.count>=8, labels.project=vision")
    description: str | None = Field(default=None, max_length=2000)


class EventSubscriptionView(View):
    """A subscription as listed: never its secret."""

    name: str
    url: str
    types: list[str]
    where: list[str]
    description: str | None = None
    enabled: bool
    created_by: str
    created_at: datetime
