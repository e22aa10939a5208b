"""Chat-ops on the wire: chat users linked to gpufleet users (docs/chatops.md, "Identity")."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from gpufleet.wire.base import Name, StrictModel, View


class ChatPlatform(StrEnum):
    SLACK = "slack"
    MATTERMOST = "mattermost"


# Slack's ids are `T0123ABC` / `U0123ABC`; Mattermost's are 26 lowercase letters and digits.
ChatId = Annotated[str, StringConstraints(min_length=1, max_length=63,
                                          pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
LinkCode = Annotated[str, StringConstraints(min_length=1, max_length=64,
                                            pattern=r"^[A-Za-z0-9_-]+$")]


class LinkCodeRedeem(StrictModel):
    """`gpufleet chatops link CODE`: the code `/gpu link` answered in chat."""

    code: LinkCode = Field(description="The one-time code `/gpu link` gave in chat.")


class ChatIdentityLink(StrictModel):
    """An administrator links a chat user to a gpufleet user by hand."""

    platform: ChatPlatform
    team_id: ChatId = Field(description="The Slack workspace (`T…`) or Mattermost team id.")
    chat_user_id: ChatId = Field(description="The chat user's id (`U…` in Slack).")
    user: Name = Field(description="The gpufleet user the chat user acts as.")


class ChatIdentityView(View):
    platform: str
    team_id: str
    chat_user_id: str
    user: str
    linked_by: str = Field(description="How: `email`, `link-code`, or the admin who did.")
    linked_at: datetime
