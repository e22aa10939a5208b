"""NUL characters (U+0000) in text: refused wherever text enters, on every database.

PostgreSQL cannot store a NUL in a text column and refuses the statement; SQLite stores it,
and C tools (and many terminals) cut the text there. So the same request must not succeed
on one database and fail with a server error on the other: the API refuses every request
whose JSON body, query string or URL path holds a NUL with 400 `nul_character`, before
anything reads its values, and telemetry batches are checked the same way once inflated.

JSON can carry a NUL in a string only as the escape `\\u0000` (a raw NUL byte is invalid
JSON, refused as such by the parser), so a body without that escape is never parsed here:
the check costs one byte search on the hot path, and a parse only when the escape appears.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

NUL = "\x00"
_NUL_ESCAPE = b"\\u0000"


class NulCharacter(ValueError):
    """Text with a NUL character; `field` names where, as validation errors do."""

    def __init__(self, field: str):
        super().__init__(f"{field}: text may not contain NUL characters (\\u0000)")
        self.field = field


def nul_field(value: Any, where: str = "") -> str | None:
    """Where the first NUL in a JSON-shaped value is (`gpus[1].name`, `labels.rack`,
    `labels (a key)`), or None. `where` is the path of `value` itself."""
    if isinstance(value, str):
        return (where or "request body") if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and NUL in key:
                return f"{where or 'request body'} (a key)"
            found = nul_field(item, inner)
            if found:
                return found
    elif isinstance(value, list):
        for n, item in enumerate(value):
            found = nul_field(item, f"{where}[{n}]")
            if found:
                return found
    return None


def json_nul_field(raw: bytes) -> str | None:
    """`nul_field` of a JSON document; None too when it is not JSON (the caller's parser
    reports that)."""
    if _NUL_ESCAPE not in raw:
        return None
    try:
        return nul_field(json.loads(raw))
    except (ValueError, RecursionError):
        return None


def refuse_nul_json(raw: bytes) -> None:
    """Raise `NulCharacter` when the JSON document `raw` holds a NUL in any text."""
    field = json_nul_field(raw)
    if field is not None:
        raise NulCharacter(field)


def refuse_nul_pairs(pairs: Iterable[tuple[str, str]], kind: str) -> None:
    """Raise `NulCharacter` for the first (name, value) pair holding a NUL: query
    parameters, named `<kind> <name>`."""
    for name, value in pairs:
        if NUL in name or NUL in value:
            raise NulCharacter(f"{kind} {name!r}" if NUL not in name else kind)
