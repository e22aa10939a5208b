"""Chat-ops edge (issue 16): Slack's signed requests in, Block Kit replies out.

Built so far: `signature` (a raw request's verdict, before anything is parsed), `payloads`
(slash commands and interactivity, parsed only from a verified body) and `blocks` (the
replies). The HTTP routes, user mapping and approvals flow stand on these: docs/chatops.md.
"""
