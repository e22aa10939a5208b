"""Text limits the wire enforces, stated once for every side of it.

Standard library only: the workload SDK (`gpufleet.tag`, imported by `import gpufleet`) and
the pure domain use these rules as well as the pydantic wire schemas, so none of them may
pull in anything heavier.

- **Label text** (`wire.telemetry.LabelText`): a label value of at most 253 characters, the
  longest DNS name, so any node, pod or namespace name fits. A value the agent reads from
  outside (a tag, an environment entry) is kept only when it is label text; a message the
  agent writes into a label field (a snapshot's `problems`) is clipped to fit.
- **Batch id** (`wire.telemetry_batch.BatchId`): names a telemetry batch on the wire and in
  the agent's spool file names.
- **Longest duration** (`domain.telemetry.durations.MAX_DURATION`): 100 years, longer than
  any window, request or token lifetime; the CLI checks `--days` / `--hours` against it
  before it sends them.
"""

from __future__ import annotations

import re

LABEL_TEXT_MAX = 253
MAX_DURATION_DAYS = 36_500
BATCH_ID = r"[A-Za-z0-9_-]{1,64}"  # a regular expression, without anchors

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_label_text(text: str) -> bool:
    """Non-empty, at most LABEL_TEXT_MAX characters, no control characters."""
    return 0 < len(text) <= LABEL_TEXT_MAX and _CONTROL.search(text) is None


def check_batch_id(batch_id: str) -> None:
    """ValueError unless `batch_id` is a BATCH_ID (it also names a spool file)."""
    if not re.fullmatch(BATCH_ID, batch_id):
        raise ValueError(f"batch id {batch_id!r} is not 1-64 letters, digits, - or _")


def clip(text: str, length: int = LABEL_TEXT_MAX) -> str:
    """`text` cut to `length` characters, the last one an ellipsis where it was cut."""
    return text if len(text) <= length else text[: length - 1] + "…"
