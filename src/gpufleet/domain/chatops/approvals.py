"""The Approve / Reject buttons' action ids: one format, written by the approval message
(domain/chatops/blocks.py, posted by services/chatops) and read back from a button press
(api/chatops/payloads.py). Pure, so both layers share it."""

from __future__ import annotations

from dataclasses import dataclass

APPROVE = "approve"
REJECT = "reject"
DECISIONS = (APPROVE, REJECT)


@dataclass(frozen=True)
class ApprovalAction:
    """An Approve or Reject button: its action id is `approve:GR-1042` or `reject:GR-1042`."""

    decision: str
    code: str

    @property
    def action_id(self) -> str:
        return f"{self.decision}:{self.code}"
