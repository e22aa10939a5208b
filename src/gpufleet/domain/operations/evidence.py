"""One line of evidence per observation: what was seen, in the units an operator reads
(`gpu.memory_used_bytes 97.3 % of gpu.memory_total_bytes ≥ 95 %`, `silent for 6 min`,
`a process holding 13.7 GiB claims GR-1277; its unit is held by GR-1243`).

The alert list shows it beside the summary; a notification carries it. Pure: the facts are
the observation's labels and annotations, passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpufleet.domain.operations.quantities import duration, show
from gpufleet.domain.operations.rules import Op, Rule, RuleKind, StateCondition


def evidence_line(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    """What the observation saw, or "" where there is nothing beyond its summary."""
    if rule.kind is RuleKind.STATE and rule.condition is not None:
        return _STATE[rule.condition](rule, value, facts)
    if value is None:
        return ""
    unit = rule.value_unit
    if rule.kind is RuleKind.THRESHOLD and rule.op is not None and rule.value is not None:
        what = f"{rule.across.value} {rule.metric}" if rule.across else rule.metric
        if rule.op is Op.HAS_ANY_BITS:
            return f"{what} {int(value):#x} & {int(rule.value):#x}"
        seen = f"{show(value, unit)} of {rule.ratio_to}" if rule.ratio_to else show(value, unit)
        return f"{what} {seen} {rule.op.symbol} {show(rule.value, unit)}"
    if rule.kind is RuleKind.INCREASE:
        return f"{rule.metric} +{show(value, unit)} in {duration(rule.over_s)}"
    if rule.kind is RuleKind.EFFICIENCY and rule.value is not None:
        return (f"efficiency {show(value, unit)} < {show(rule.value, unit)} "
                f"over {duration(rule.over_s)}")
    if rule.kind is RuleKind.ABSENCE:
        return f"silent for {duration(value)}"
    return show(value, unit)


def _shown(rule: Rule, value: float | None) -> str:
    return "" if value is None else show(value, rule.value_unit)


def _nothing(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    return _shown(rule, value)


def _pending(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    return f"pending for {_shown(rule, value)}" if value is not None else ""


def _quota(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    return f"{_shown(rule, value)} of the quota held" if value is not None else ""


def _pool(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    return f"{_shown(rule, value)} of the pool's units held" if value is not None else ""


def _idle(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    if value is None:
        return ""
    held = ", its memory held" if facts.get("state") == "idle_held" else ""
    return f"idle for {_shown(rule, value)}{held}"


_ZOMBIE_REASONS = {
    "no_binding": "no allocation holds its unit",
    "binding_ended": "the binding of its unit has ended",
    "no_sm_activity": "no SM activity of its own for the idle window",
}


def _zombie(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    reason = facts.get("reason", "")
    why = _ZOMBIE_REASONS.get(reason, reason)
    held = f"holds {_shown(rule, value)}; " if value is not None else ""
    return f"{held}{why}" if why else held.removesuffix("; ")


def _unattributed(rule: Rule, value: float | None, facts: Mapping[str, str]) -> str:
    """Says which of the two faults it is: usage no allocation holds, or a claim naming an
    allocation that does not hold the unit (docs/design.md, "Concepts")."""
    kind = facts.get("kind", "")
    what = {"process": "a process", "activity": "activity",
            "workload_claim": "a workload claim"}.get(kind, kind or "usage")
    if value is not None:
        what += f" holding {_shown(rule, value)}"
    claimed = facts.get("claimed_allocation")
    if facts.get("reason") == "mismatch" and claimed:
        holder = facts.get("allocation")
        return f"{what} claims {claimed}; its unit is held by {holder}" if holder else \
            f"{what} claims {claimed}, which does not hold its unit"
    return f"{what} on a unit no allocation holds"


_STATE: dict[StateCondition, Callable[[Rule, float | None, Mapping[str, str]], str]] = {
    StateCondition.NODE_UNREACHABLE: _nothing,
    StateCondition.GPU_QUARANTINED: _nothing,
    StateCondition.REQUEST_PENDING: _pending,
    StateCondition.QUOTA_NEARLY_EXHAUSTED: _quota,
    StateCondition.POOL_NEARLY_EXHAUSTED: _pool,
    StateCondition.IDLE_ALLOCATION: _idle,
    StateCondition.ZOMBIE_PROCESS: _zombie,
    StateCondition.UNATTRIBUTED_USAGE: _unattributed,
}
