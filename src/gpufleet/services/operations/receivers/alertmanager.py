"""An Alertmanager: the notification as one alert of its API v2 (`POST /api/v2/alerts`);
Alertmanager de-duplicates by labels, so a repeat after a lost reply is harmless."""

from __future__ import annotations

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.domain.operations.rendering import alertmanager_alert
from gpufleet.services.operations.receivers.outgoing import Outgoing, Transport, http_attempt


def deliver(message: Outgoing, transport: Transport) -> Attempt:
    url = message.config["url"].rstrip("/") + "/api/v2/alerts"
    alert = alertmanager_alert(message.payload, message.created_at)
    return http_attempt(lambda: transport.http.post(url, json=[alert],
                                                    timeout=transport.timeout_s))
