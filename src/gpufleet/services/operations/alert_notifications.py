"""Turn what an evaluation owes people into notifications: one per group and change.

Alerts are grouped by their rule's `group_by` labels (`alert_state.group_key`); a group
with alerts to tell gets one `alert.firing` notification listing them (new ones and
repeats), and one `alert.resolved` listing those that ended. Each carries the labels all
its alerts share plus `alertname` and `severity`, so receivers route by project,
environment and severity (docs/operations.md, "Routing"), and names the owners of the
alerts' allocations. Its de-duplication key is stable per (group, transition): the same
alerts entering the same state in the same episode make the same key, so a re-run tells
nobody twice.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.domain.operations.alert_state import Tell, common_labels
from gpufleet.domain.operations.notifications import Notification, Severity

KIND_FIRING = "alert.firing"
KIND_RESOLVED = "alert.resolved"
MAX_LISTED = 50  # alerts listed in one notification's text; the rest are counted


@dataclass(frozen=True)
class Owed:
    """An alert (its row: the `alerts` table's columns) and what it owes people."""

    alert: Mapping[str, Any]
    tell: Tell


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _episode_mark(owed: Owed, now: datetime) -> str:
    """What makes this telling of this alert unique: the episode for a first firing or a
    resolution, the round for a repeat."""
    alert = owed.alert
    if owed.tell is Tell.FIRING:
        return f"{alert['fingerprint']}@{alert['active_since'].isoformat()}"
    if owed.tell is Tell.RESOLVED:
        resolved = alert["resolved_at"]
        return f"{alert['fingerprint']}@{resolved.isoformat() if resolved else ''}"
    return f"{alert['fingerprint']}@repeat@{now.isoformat()}"


def _line(alert: Mapping[str, Any]) -> str:
    labels = " ".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()))
    evidence = alert["evidence"] or ""
    what = alert["annotations"].get("summary") or alert["rule"]
    # An observation's evidence already opens with its summary (`summary (what was
    # seen)`): the line says it once.
    shown = evidence if evidence.startswith(what) else \
        f"{what} ({evidence})" if evidence else what
    return f"- {shown} [{labels}]"


def build(owed: Iterable[Owed], now: datetime) -> list[Notification]:
    """Per (group, firing | resolved) with something to tell: one notification for the
    channels (broadcast receivers), listing the group's alerts, and one per owner listing
    only that owner's. A group mixes projects (by default it is the rule and the
    environment), and a member sees only the alerts naming their projects
    (docs/operations.md, "Alert lifecycle", "Who sees what"): an owner's copy never
    lists another project's alerts."""
    groups: dict[tuple[str, str], list[Owed]] = defaultdict(list)
    for o in owed:
        kind = KIND_RESOLVED if o.tell is Tell.RESOLVED else KIND_FIRING
        groups[(o.alert["group_key"], kind)].append(o)
    notes = []
    for (group, kind), members in sorted(groups.items()):
        members.sort(key=lambda o: o.alert["fingerprint"])
        notes.append(_notification(group, kind, members, now))
        by_owner: dict[str, list[Owed]] = defaultdict(list)
        for o in members:
            for owner in o.alert["owners"]:
                by_owner[owner].append(o)
        notes += [_notification(group, kind, theirs, now, owner=owner)
                  for owner, theirs in sorted(by_owner.items())]
    return notes


def _notification(group: str, kind: str, members: list[Owed], now: datetime,
                  owner: str | None = None) -> Notification:
    """The channels' copy (`owner` None: no owners, broadcast), or one owner's (only to
    them, never to a channel)."""
    alerts = [o.alert for o in members]
    severity = max((Severity(a["severity"]) for a in alerts), key=lambda s: s.rank)
    labels = common_labels([a["labels"] for a in alerts])
    labels.update(alertname=alerts[0]["rule"], severity=severity.value)
    word = "FIRING" if kind == KIND_FIRING else "RESOLVED"
    rule = alerts[0]["rule"]
    summary = alerts[0]["annotations"].get("summary") or rule
    lines = [_line(a) for a in alerts[:MAX_LISTED]]
    if len(alerts) > MAX_LISTED:
        lines.append(f"… and {len(alerts) - MAX_LISTED} more")
    marks = ",".join(_episode_mark(o, now) for o in members)
    return Notification(
        kind=kind, severity=severity, summary=f"[{word}:{len(alerts)}] {rule}: {summary}",
        dedup_key=f"{kind}|{_digest(group)}|{_digest(marks)}", text="\n".join(lines),
        labels=labels, owners=(owner,) if owner else (), broadcast=owner is None)
