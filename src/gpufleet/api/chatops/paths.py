"""The chat platforms' request URLs: signed (Slack) or tokened (Mattermost), never bearer
(api/auth_gate.py lets exactly these through; each route verifies its own caller first)."""

SLACK_COMMANDS_PATH = "/api/v1/chatops/slack/commands"
SLACK_INTERACTIONS_PATH = "/api/v1/chatops/slack/interactions"
MATTERMOST_COMMANDS_PATH = "/api/v1/chatops/mattermost/commands"
CHAT_PLATFORM_PATHS = frozenset({SLACK_COMMANDS_PATH, SLACK_INTERACTIONS_PATH,
                                 MATTERMOST_COMMANDS_PATH})
