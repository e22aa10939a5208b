"""How a health transition reads in a notification: the cause in one line, and the text
(from → to, when, the rule and its evidence or who moved it by hand). Shared by the GPU's
and the MIG instances' messages, so both read alike."""

from __future__ import annotations

from gpufleet.store.tables import GpuHealthTransition


def cause_of(t: GpuHealthTransition) -> str:
    if t.rule and t.evidence:
        return t.evidence["line"]
    return f"by {t.actor}: {t.reason}" if t.reason else f"by {t.actor}"


def text_of(t: GpuHealthTransition) -> str:
    lines = [f"{t.from_state} → {t.to_state} at {t.at.isoformat(timespec='seconds')}"]
    if t.rule:
        lines.append(f"rule {t.rule}: {t.evidence['line']}" if t.evidence else f"rule {t.rule}")
    else:
        lines.append(f"by {t.actor}" + (f": {t.reason}" if t.reason else ""))
    return "\n".join(lines)
