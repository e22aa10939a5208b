"""Chat-ops edge (issue 16): Slack's signed requests in, Block Kit replies out.

Built so far: `signature` (a raw request's verdict, before anything is parsed) and
`payloads` (slash commands and interactivity, parsed only from a verified body); the
replies are `domain/chatops/blocks` (pure: the outbound notifier in services uses them
too). The HTTP routes, user mapping and approvals flow stand on these: docs/chatops.md.
"""
