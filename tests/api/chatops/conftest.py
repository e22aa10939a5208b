"""Chat-ops tests run against a server with Slack and Mattermost configured."""

from tests.api.chatops.slack_world import settings, slack  # noqa: F401  (fixtures)
