"""The FastAPI application: routes, error mapping, body limits and background loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool

from gpufleet import __version__
from gpufleet.api import errors, openapi_doc
from gpufleet.api.auth_gate import BearerRequired
from gpufleet.api.chatops import routes as chatops_routes
from gpufleet.api.deps import refuse_nul_characters
from gpufleet.api.limits import BodySizeLimit
from gpufleet.api.routes import (
    agent,
    alert_rules,
    alerts,
    billing,
    events,
    health,
    identity,
    inventory,
    lifecycle,
    mig,
    prometheus,
    receivers,
    reclaim,
    server_settings,
    telemetry,
    telemetry_queries,
)
from gpufleet.api.timing import ServerTiming
from gpufleet.api.web import routes as web
from gpufleet.api.web.sessions import WebSessions
from gpufleet.domain.errors import GpufleetError
from gpufleet.services.app import Gpufleet
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH

log = logging.getLogger(__name__)


async def _silent_node_loop(gf: Gpufleet) -> None:
    """Mark nodes unreachable once they miss heartbeats; runs for the server's lifetime."""
    interval_s = max(1.0, gf.settings.heartbeat_interval_s)
    while True:
        await asyncio.sleep(interval_s)
        try:
            silent = await run_in_threadpool(gf.mark_silent_nodes_unreachable)
            if silent:
                log.warning("%d node(s) became unreachable: %s", len(silent),
                            ", ".join(silent[:10]))
        except GpufleetError as exc:
            log.warning("silent-node sweep skipped: %s", exc.message)


async def _lifecycle_loop(gf: Gpufleet) -> None:
    """Expire allocations whose end passed and grant approved requests that wait; first,
    read the fleet into the placement cache, so the first grant does not wait for it."""
    try:
        await run_in_threadpool(gf.lifecycle.warm)
    except Exception:  # a grant reads it then
        log.exception("placement cache warm-up failed")
    while True:
        await asyncio.sleep(gf.settings.lifecycle_interval_s)
        try:
            expired, granted = await run_in_threadpool(gf.lifecycle.tick)
            if expired or granted:
                log.info("lifecycle: %d expired, %d granted", len(expired), granted)
        except GpufleetError as exc:
            log.warning("lifecycle round skipped: %s", exc.message)
        except Exception:  # the loop must outlive a bug in one round
            log.exception("lifecycle round failed")


async def _reclaim_loop(gf: Gpufleet) -> None:
    """Reclamation rounds on a cadence: warn idle allocations, act when their grace ends,
    warn of allocations' ends (leader-locked: one replica acts)."""
    while True:
        await asyncio.sleep(gf.settings.reclaim_interval_s)
        try:
            result = await run_in_threadpool(gf.reclaim.tick)
            if result.steps or result.ending_warned:
                log.info("reclamation: %d step(s), %d end warning(s)", len(result.steps),
                         len(result.ending_warned))
        except GpufleetError as exc:
            log.warning("reclamation round skipped: %s", exc.message)
        except Exception:  # the loop must outlive a bug in one round
            log.exception("reclamation round failed")


async def _telemetry_upkeep_loop(gf: Gpufleet) -> None:
    """Roll telemetry up and apply its retention, for the server's lifetime; the first round
    at start, so the funnel's caches are built before anyone asks."""
    while True:
        try:
            await run_in_threadpool(gf.telemetry_upkeep)
        except Exception:  # the loop must outlive one failed round; the next one retries
            log.exception("telemetry rollup round failed")
        await asyncio.sleep(gf.settings.telemetry_rollup_interval_s)


async def _alert_loop(gf: Gpufleet) -> None:
    """Evaluate the alert rules and record what they saw, for the server's lifetime
    (`Gpufleet.alert_round`: leader-locked, idempotent)."""
    while True:
        await asyncio.sleep(gf.settings.alert_evaluation_interval_s)
        try:
            outcome = await run_in_threadpool(gf.alert_round)
            if outcome and outcome.changes:
                log.info("alerts: %s; %d notification(s) queued", outcome.changes,
                         outcome.notifications)
        except GpufleetError as exc:
            log.warning("alert round skipped: %s", exc.message)
        except Exception:  # the loop must outlive a bug in one round
            log.exception("alert round failed")
async def _outbox_loop(gf: Gpufleet) -> None:
    """Deliver queued notifications (docs/operations.md, "The outbox"). Each round only
    claims and hands out work, so a slow receiver never holds the loop; every replica
    runs it, and row claims keep them apart."""
    while True:
        await asyncio.sleep(gf.settings.outbox_send_interval_s)
        try:
            await run_in_threadpool(gf.send_notifications)
        except GpufleetError as exc:
            log.warning("outbox round skipped: %s", exc.message)
        except Exception:  # the loop must outlive a bug in one round
            log.exception("outbox round failed")
async def _chatops_loop(gf: Gpufleet) -> None:
    """Post approvals and requesters' thread updates to Slack (docs/chatops.md); one
    replica tells (leader lock and a lease on the cursor), and without a bot token a round
    does nothing."""
    while True:
        await asyncio.sleep(gf.settings.outbox_send_interval_s)
        if not gf.chat_notifier.enabled:
            continue
        try:
            await run_in_threadpool(gf.chat_notifier.run_once)
        except GpufleetError as exc:
            log.warning("chat-ops round skipped: %s", exc.message)
        except Exception:  # the loop must outlive a bug in one round
            log.exception("chat-ops round failed")


async def _gpu_health_loop(gf: Gpufleet) -> None:
    """Apply the GPU health rules every `health_interval_s` (docs/operations.md, "GPU
    health and quarantine"); one replica applies, and a round is idempotent."""
    while True:
        await asyncio.sleep(gf.settings.health_interval_s)
        try:
            moves = await run_in_threadpool(gf.evaluate_gpu_health)
            for uuid, before, after, rule in moves:
                log.warning("GPU %s: %s → %s (%s)", uuid, before, after, rule or "cleared")
        except GpufleetError as exc:
            log.warning("GPU health round skipped: %s", exc.message)
        except Exception:  # the loop must outlive a bug in one round
            log.exception("GPU health round failed")


DOCS_ASSETS_PATH = "/docs-assets"


def create_app(gf: Gpufleet, *, background_loops: bool = True) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        loops = (_silent_node_loop, _lifecycle_loop, _telemetry_upkeep_loop, _gpu_health_loop,
                 _alert_loop, _reclaim_loop, _outbox_loop, _chatops_loop)
        tasks = [asyncio.create_task(loop(gf)) for loop in loops] if background_loops else []
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # Swagger UI and ReDoc from a package's own copies of their assets, never a CDN: the
    # server runs air-gapped (tests/api/test_offline_pages.py fails on any outside host).
    # Swagger UI's validator badge would call validator.swagger.io: off.
    app = FastAPIOffline(title="gpufleet", version=__version__, lifespan=lifespan,
                         static_url=DOCS_ASSETS_PATH,
                         swagger_ui_parameters={"validatorUrl": None},
                         dependencies=[Depends(refuse_nul_characters)],
                         description="GPU fleet operations: who is using how many GPUs, "
                                     "where, and how well. Every /api/v1 endpoint needs a "
                                     "bearer token.")
    app.state.gpufleet = gf
    app.state.web_sessions = WebSessions()
    errors.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=gf.settings.max_request_body_bytes,
                       limits_by_path=dict.fromkeys(
                           (TELEMETRY_BATCHES_PATH, telemetry.REMOTE_WRITE_PATH),
                           gf.settings.telemetry_max_batch_bytes))
    app.add_middleware(BearerRequired)
    app.add_middleware(ServerTiming)
    # Telemetry uploads are most of the requests; routes are matched in order, one by one.
    app.include_router(telemetry.router)
    app.include_router(inventory.router)
    app.include_router(identity.router)
    app.include_router(agent.router)
    app.include_router(lifecycle.router)
    app.include_router(mig.router)
    app.include_router(prometheus.router)
    app.include_router(telemetry_queries.router)
    app.include_router(server_settings.router)
    app.include_router(events.router)
    app.include_router(alerts.router)
    app.include_router(reclaim.router)
    app.include_router(receivers.router)
    app.include_router(health.router)
    app.include_router(alert_rules.router)
    app.include_router(billing.router)
    app.include_router(chatops_routes.router)
    web.install(app)

    @app.get("/healthz", tags=["health"])
    def healthz():
        """Liveness: the process answers. Unauthenticated, reveals nothing."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz():
        """Readiness: the state store answers (503 otherwise). Unauthenticated."""
        gf.ready()
        return {"status": "ready"}

    openapi_doc.install(app)
    return app
