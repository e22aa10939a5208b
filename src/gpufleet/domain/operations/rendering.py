"""How a notification reads in each receiver: Slack Block Kit, an e-mail, an Alertmanager
alert. Pure: the same payload (`Notification.as_payload`) renders the same everywhere.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from gpufleet.domain.operations.notifications import UNIT_LABELS

_SEVERITY_MARK = {"info": "ℹ️", "warning": "⚠️", "critical": "🚨"}
# Alertmanager label names: Prometheus's grammar.
_LABEL_NAME = re.compile(r"[^A-Za-z0-9_]")


def headline(payload: dict[str, Any]) -> str:
    """One line: `[critical] GPU-3f2a quarantined by XID 79`."""
    return f"[{payload.get('severity', 'info')}] {payload.get('summary', '')}".strip()


def label_line(payload: dict[str, Any]) -> str:
    """The unit labels first, in their fixed order, then any others."""
    labels: dict[str, str] = dict(payload.get("labels") or {})
    ordered = [k for k in UNIT_LABELS if labels.get(k)] + sorted(
        k for k in labels if k not in UNIT_LABELS and labels[k])
    return ", ".join(f"{k}={labels[k]}" for k in ordered)


def plain_text(payload: dict[str, Any]) -> str:
    """The body of an e-mail, and Slack's fallback text (notifications, screen readers)."""
    lines = [headline(payload)]
    if payload.get("text"):
        lines += ["", str(payload["text"])]
    if label_line(payload):
        lines += ["", label_line(payload)]
    lines += ["", f"kind: {payload.get('kind', '')}"]
    return "\n".join(lines)


def slack_message(payload: dict[str, Any]) -> dict[str, Any]:
    """`text` (fallback) and Block Kit `blocks`: a section with the headline and text, a
    context line with the labels and the kind."""
    mark = _SEVERITY_MARK.get(str(payload.get("severity")), "")
    body = f"{mark} *{_escape(str(payload.get('summary', '')))}*".strip()
    if payload.get("text"):
        body += f"\n{_escape(str(payload['text']))}"
    context = " · ".join(x for x in (str(payload.get("kind", "")),
                                     _escape(label_line(payload))) if x)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": body[:3000]}}]
    if context:
        blocks.append({"type": "context",
                       "elements": [{"type": "mrkdwn", "text": context[:3000]}]})
    return {"text": headline(payload)[:3000], "blocks": blocks}


def _escape(text: str) -> str:
    """Slack's mrkdwn control characters (api.slack.com, "Formatting text")."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def email_subject(payload: dict[str, Any]) -> str:
    return " ".join(headline(payload).split())[:200]


def alertmanager_alert(payload: dict[str, Any], created_at: datetime) -> dict[str, Any]:
    """One alert of Alertmanager's API v2 (`POST /api/v2/alerts`).

    Labels are the notification's labels (names made Prometheus-safe) plus `alertname` —
    the label `alertname`, else `rule`, else `GpufleetAlert` for alerts and the kind for
    other notifications — and `severity`. Alertmanager identifies an alert by its labels,
    so `alert.resolved` (which sets `endsAt`) resolves the `alert.firing` (`startsAt`) of
    the same labels. The times are the payload's `starts_at` / `ends_at` where the alert
    rule gave them, else when the notification was queued. Any other kind is a one-off:
    it starts when queued and ends `ONE_OFF_ALERT_S` later.
    """
    kind = str(payload.get("kind", ""))
    labels = {_LABEL_NAME.sub("_", k): str(v)
              for k, v in (payload.get("labels") or {}).items() if str(v)}
    labels.setdefault("alertname", labels.get("rule") or (
        "GpufleetAlert" if kind.startswith("alert.") else kind or "gpufleet"))
    labels["severity"] = str(payload.get("severity", "info"))
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": {k: v for k, v in (("summary", payload.get("summary")),
                                          ("description", payload.get("text"))) if v},
    }
    if kind == "alert.resolved":
        alert["endsAt"] = payload.get("ends_at") or _iso(created_at)
        if payload.get("starts_at"):
            alert["startsAt"] = payload["starts_at"]
    elif kind == "alert.firing":
        alert["startsAt"] = payload.get("starts_at") or _iso(created_at)
    else:
        alert["startsAt"] = _iso(created_at)
        alert["endsAt"] = _iso(created_at + timedelta(seconds=ONE_OFF_ALERT_S))
    return alert


ONE_OFF_ALERT_S = 300


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
