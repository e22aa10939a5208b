"""Telemetry queries: range and instant queries, latest snapshots, funnel, idle lists."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v1/telemetry", tags=["telemetry"])
