"""Chat-ops: Slack and Mattermost users driving the lifecycle (docs/chatops.md)."""
