"""Chat-ops grammar: the `/gpu` slash command's text read into typed commands (pure)."""
