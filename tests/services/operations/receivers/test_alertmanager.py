"""Alert notifications pushed to a REAL Alertmanager (Debian's prometheus-alertmanager),
started on a free port with a temporary config."""

from __future__ import annotations

import httpx

from gpufleet.services.operations.receivers import alertmanager
from tests.local_receivers import real_alertmanager
from tests.services.operations.receivers.outgoing_world import outgoing, transport

FIRING = {"kind": "alert.firing", "severity": "warning",
          "summary": "GPU memory above 95 % for 10 m", "text": "vision's job is near OOM",
          "labels": {"alertname": "GpuMemorySaturated", "project": "vision", "node": "n1",
                     "gpu": "GPU-3f2a", "allocation": "GR-1042"},
          "dedup_key": "a-1", "starts_at": "2026-11-02T08:50:00Z"}


def _alerts(url: str, active: bool = True) -> list[dict]:
    return httpx.get(f"{url}/api/v2/alerts", params={
        "active": str(active).lower(), "silenced": "true", "inhibited": "true",
        "unprocessed": "true"}).json()


def test_a_firing_alert_appears_with_its_labels_and_resolves(tmp_path):
    with real_alertmanager(tmp_path) as url, transport() as t:
        fired = alertmanager.deliver(outgoing("alertmanager", {"url": url}, payload=FIRING), t)
        assert fired.ok, fired
        [alert] = _alerts(url)
        assert alert["labels"] == {"alertname": "GpuMemorySaturated", "project": "vision",
                                   "node": "n1", "gpu": "GPU-3f2a", "allocation": "GR-1042",
                                   "severity": "warning"}
        assert alert["annotations"]["summary"] == FIRING["summary"]
        assert alert["startsAt"].startswith("2026-11-02T08:50:00")
        resolved = {**FIRING, "kind": "alert.resolved", "ends_at": "2026-11-02T09:00:00Z"}
        assert alertmanager.deliver(outgoing("alertmanager", {"url": url},
                                             payload=resolved), t).ok
        assert _alerts(url) == []  # resolved in the past: no longer active


def test_a_bad_alert_is_refused_and_logged_as_the_status(tmp_path):
    with real_alertmanager(tmp_path) as url, transport() as t:
        broken = {**FIRING, "starts_at": "not a time"}
        attempt = alertmanager.deliver(outgoing("alertmanager", {"url": url},
                                                payload=broken), t)
    assert (attempt.ok, attempt.outcome) == (False, "http_400")
