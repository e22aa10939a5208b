"""Validation errors as the API reports them: each one's field, problem and type.

The API edge reports a malformed request body this way (api/errors.py), and telemetry
ingest reports a malformed batch the same way, so a client reads one shape.
"""

from __future__ import annotations

from collections.abc import Iterable

# What a location names when it stops at the part of the request itself.
_WHOLE = {"body": "request body", "query": "query string", "path": "URL path",
          "header": "headers", "cookie": "cookies"}
# Prefixes pydantic puts before the message of a ValueError / AssertionError raised in a
# validator: they name Python's exception class, not anything the caller did.
_NOISE = ("Value error, ", "Assertion failed, ")


def location(loc: tuple) -> str:
    """`("body", "gpus", 1, "uuid")` → `gpus[1].uuid`; `("body",)` → `request body`."""
    if not loc:
        return "request"
    if len(loc) == 1 and loc[0] in _WHOLE:
        return _WHOLE[loc[0]]
    parts = loc[1:] if loc[0] in _WHOLE else loc
    field = ""
    for part in parts:
        field += f"[{part}]" if isinstance(part, int) else f".{part}"
    return field.lstrip(".")


def problem(error: dict) -> str:
    message = error.get("msg") or "invalid"
    for prefix in _NOISE:
        message = message.removeprefix(prefix)
    return message


def field_error(error: dict) -> dict[str, str]:
    """One pydantic error as `{"field", "problem", "type"}`."""
    kind, loc = error.get("type", ""), tuple(error.get("loc", ()))
    if kind == "json_invalid":  # FastAPI puts the character offset where a field would be
        at = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        reason = (error.get("ctx") or {}).get("error")
        return {"field": "request body", "type": kind,
                "problem": f"invalid JSON{at}" + (f": {reason}" if reason else "")}
    return {"field": location(loc), "problem": problem(error), "type": kind}


def summary(errors: Iterable[dict[str, str]]) -> str:
    """The first error as one line, and how many more there are."""
    errors = list(errors)
    first = errors[0] if errors else {"field": "request", "problem": "invalid"}
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first['field']}: {first['problem']}{more}"
