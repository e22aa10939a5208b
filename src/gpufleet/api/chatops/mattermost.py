"""Is this raw request Mattermost's `/gpu`? Mattermost signs nothing: each slash command
carries the command's token in its `token` form field, compared here in constant time with
`mattermost_command_token` before any other field is read.

The form must be split to find the token — the one field read before the verdict, and only
compared, never logged. Only an accepted check returns a `VerifiedBody`, which is what the
payload parsers take, as for Slack's signatures.
"""

from __future__ import annotations

import hmac
import logging
from urllib.parse import parse_qsl

from gpufleet.api.chatops.payloads import MAX_FIELDS
from gpufleet.api.chatops.signature import MAX_BODY_BYTES, VerifiedBody

log = logging.getLogger(__name__)


def check_token(expected: str, body: bytes) -> VerifiedBody | None:
    """The body as verified when its `token` field is `expected`; None (logged) otherwise."""
    presented = _token(body)
    if presented is None or not hmac.compare_digest(presented.encode(), expected.encode()):
        log.warning("Mattermost request refused: %s",
                    "no token" if presented is None else "wrong token")
        return None
    return VerifiedBody(body)


def _token(body: bytes) -> str | None:
    if len(body) > MAX_BODY_BYTES:
        return None
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                          max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        return None
    tokens = [value for name, value in pairs if name == "token"]
    return tokens[0] if len(tokens) == 1 and tokens[0] else None
