"""A Slack user's e-mail, from Slack's Web API (`users.info`), to link them by it.

Needs the bot token (`slack_bot_token`, scopes `users:read` and `users:read.email`); the
base URL is `slack_api_url`, so a test or an air-gapped proxy can stand in for Slack. Any
failure — no token, Slack unreachable, an error answer, no e-mail in the profile — is None:
the chat user is then told how to link with a code, and nothing else happens. The token is
never logged.
"""

from __future__ import annotations

import logging

from slack_sdk import WebClient
from slack_sdk.errors import SlackClientError

from gpufleet.settings import Settings

log = logging.getLogger(__name__)
TIMEOUT_S = 2  # Slack wants a slash command answered within 3 s


class SlackDirectory:
    def __init__(self, settings: Settings):
        token = settings.slack_bot_token
        self._client = (WebClient(token=token.get_secret_value(), base_url=settings.slack_api_url,
                                  timeout=TIMEOUT_S) if token else None)

    def email_of(self, chat_user_id: str) -> str | None:
        if self._client is None:
            return None
        try:
            response = self._client.users_info(user=chat_user_id)
        except (SlackClientError, OSError, ValueError) as exc:
            log.warning("Slack users.info failed for a chat user: %s", type(exc).__name__)
            return None
        user = response.get("user")
        profile = user.get("profile") if isinstance(user, dict) else None
        email = profile.get("email") if isinstance(profile, dict) else None
        return email if isinstance(email, str) and "@" in email else None
