"""The lifecycle's front door: requests, approvals, pools, quotas, and the lifecycle loop.

One method per use case, one transaction each — except granting (services/lifecycle/granter.py):
an operator's approval is made in the transaction that grants the request, batched with
the other approvals and grants that arrive together, and retried when the database refuses
a claim another server won meanwhile. The approval is never lost to a failed placement: if
the grant keeps being refused, the approval is written alone and the request waits,
approved, for the loop. Auto-approved requests are granted right after their creation.
Placement decides on the in-memory placement cache (services/lifecycle/placement_cache.py);
whatever frees units or changes the fleet tells it which nodes to re-read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.domain.access import Action
from gpufleet.domain.requests import RequestState
from gpufleet.services.access import people
from gpufleet.services.access.people import get_project
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.fleet_shape import FleetShape
from gpufleet.services.lifecycle import placement_state, pools, quotas, requests
from gpufleet.services.lifecycle.bindings import MODES_CHANGED, RELEASED_NODE_IDS
from gpufleet.services.lifecycle.granter import Approval, Granter
from gpufleet.services.lifecycle.placement_cache import PlacementCache
from gpufleet.services.lookup import not_found
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import GpuRequest, Pool
from gpufleet.wire import requests as wr
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import AuditEventView

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(self, store: StateStore, settings: Settings, clock: Clock):
        self.store = store
        self.settings = settings
        self.clock = clock
        self.placement = PlacementCache(settings.placement_policy,
                                        settings.placement_cache_max_age_s)
        self.granter = Granter(store, clock, self.placement)
        self.shape = FleetShape(settings.placement_cache_max_age_s)

    # --- requests ------------------------------------------------------------------------
    def create_request(self, principal: Principal, body: wr.RequestCreate, *,
                       also: Callable[[Session, int], None] | None = None) -> wr.RequestView:
        """`also(session, request_id)` writes in the request's own transaction: what the
        request's events must find when they are read (a chat request's origin), commits
        with it or not at all."""
        with self._write() as session:
            request = requests.create(session, principal, body, self.clock.now(),
                                      self.settings.max_request_days, self.shape,
                                      self.settings.default_request_days)
            request_id, approved = request.id, request.state == RequestState.APPROVED.value
            if also is not None:
                also(session, request_id)
        return self._grant(request_id) if approved else self._view(request_id)

    def preview_request(self, principal: Principal, body: wr.RequestCreate
                        ) -> wr.RequestPreview:
        """What `create_request(body)` would come to now: decided on the placement cache
        as a grant would be, in a read-only snapshot, with nothing applied."""
        now = self.clock.now()
        return self.granter.dry_run(lambda session, fleet: requests.preview(
            session, principal, body, now, self.settings.max_request_days, self.shape,
            self.settings.default_request_days, fleet))

    def list_requests(self, principal: Principal, *, state: str | None, project: str | None,
                      cursor: str | None, limit: int, node: str | None = None,
                      gpu: str | None = None) -> Page[wr.RequestView]:
        principal.require(Action.READ_REQUESTS)
        before = requests.request_id_from_code(cursor) if cursor else None
        with self.store.read() as session:
            rows, next_id = requests.list_requests(session, principal, state=state,
                                                   project=project, node=node, gpu=gpu,
                                                   before=before, limit=limit)
            items = requests.views(session, rows)
        return Page[wr.RequestView](items=items, next_cursor=(
            requests.request_code(next_id) if next_id is not None else None))

    def show_request(self, principal: Principal, code: str) -> wr.RequestView:
        principal.require(Action.READ_REQUESTS)
        with self.store.read() as session:
            request = requests.get_request(session, principal, code)
            return requests.view(session, request, with_history_units=True)

    def _view(self, request_id: int) -> wr.RequestView:
        with self.store.read() as session:
            return requests.view(session, session.get(GpuRequest, request_id))

    def approve(self, principal: Principal, code: str, reason: str | None) -> wr.RequestView:
        request_id = requests.request_id_from_code(code)
        if request_id is None:
            raise not_found("request", code)
        return self.granter.approve(request_id, Approval(principal, reason))

    def reject(self, principal: Principal, code: str, reason: str | None) -> wr.RequestView:
        with self._write() as session:
            request_id = requests.reject(session, principal, code, self.clock.now(), reason).id
        return self._view(request_id)

    def cancel(self, principal: Principal, code: str, reason: str | None) -> wr.RequestView:
        with self._write() as session:
            request_id = requests.cancel(session, principal, code, self.clock.now(), reason).id
        return self._view(request_id)

    def release(self, principal: Principal, code: str, reason: str | None) -> wr.RequestView:
        with self._write() as session:
            request_id = requests.release(session, principal, code, self.clock.now(),
                                          reason).id
        self.grant_waiting()  # released units may be what the queue waits for
        return self._view(request_id)

    def extend(self, principal: Principal, code: str, body: wr.Extend) -> wr.RequestView:
        with self._write() as session:
            request_id = requests.extend(session, principal, code, body, self.clock.now(),
                                         self.settings.max_request_days).id
        return self._view(request_id)

    def why(self, principal: Principal, code: str) -> wr.RequestWhy:
        principal.require(Action.READ_REQUESTS)
        with self.store.read() as session:
            return requests.why(session, principal, code, self.clock.now(),
                                self.settings.max_request_days, self.settings.placement_policy)

    def history(self, principal: Principal, code: str, cursor: str | None,
                limit: int) -> Page[AuditEventView]:
        principal.require(Action.READ_REQUESTS)
        with self.store.read() as session:
            events, next_cursor = requests.history(session, principal, code, cursor, limit)
            return Page[AuditEventView](items=[AuditEventView.model_validate(e)
                                               for e in events], next_cursor=next_cursor)

    # --- granting and the loop -----------------------------------------------------------
    def _grant(self, request_id: int) -> wr.RequestView:
        """Try to place and bind one approved request; its view afterwards."""
        view = self.granter.grant([request_id]).get(request_id)
        return view if view is not None else self._view(request_id)

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction that may free units: once it commits, the placement cache
        re-reads the nodes whose units it freed (and the fleet's shape is re-read when a
        GPU's pending sharing mode applied)."""
        with self.store.write() as session:
            yield session
            freed = session.info.get(RELEASED_NODE_IDS, ())
            modes_changed = session.info.get(MODES_CHANGED, set())
        self.placement.mark_stale_ids(freed)
        if modes_changed:  # a GPU took the mode its node reported: the fleet's shape moved
            self.placement.mark_stale(modes_changed)
            self.shape.invalidate()

    def freeing_write(self) -> AbstractContextManager[Session]:
        """A write transaction for another service that ends bindings (reclamation): the
        placement cache re-reads the nodes it freed once it commits."""
        return self._write()

    def expire_due(self) -> list[str]:
        with self._write() as session:
            if not self.store.try_leader_lock(session, "lifecycle-expiry"):
                return []
            return requests.expire_due(session, self.clock.now())

    def grant_waiting(self) -> int:
        """Grant approved requests whose start has come, oldest first; how many became
        active."""
        with self.store.read() as session:
            waiting = requests.waiting_ids(session, self.clock.now())
        if not waiting:
            return 0
        views = self.granter.grant(waiting).values()
        return sum(view.state == RequestState.ACTIVE.value for view in views)

    def warm(self) -> None:
        """Load the placement cache (the server does this at start)."""
        self.granter.warm()

    def tick(self) -> tuple[list[str], int]:
        """One round of the lifecycle loop: expire what ended, then grant what waits."""
        expired = self.expire_due()
        return expired, self.grant_waiting()

    def placement_fleet_state(self, principal: Principal) -> dict:
        principal.require(Action.READ_INVENTORY)
        with self.store.read() as session:
            return placement_state.load(session).state.to_json()

    # --- quotas and auto-approval --------------------------------------------------------
    def project_quotas(self, principal: Principal, project: str) -> wr.ProjectQuotas:
        principal.require(Action.READ_PROJECTS)
        with self.store.read() as session:
            people.show_project(session, principal, project)  # 404 unless visible
            found = get_project(session, project)
            return wr.ProjectQuotas(project=found.name,
                                    quotas=quotas.quota_views(session, found),
                                    auto_approve=quotas.auto_approve_view(session, found))

    def set_quota(self, principal: Principal, project: str, body: wr.QuotaSet
                  ) -> wr.ProjectQuotas:
        principal.require(Action.MANAGE_QUOTAS)
        with self._write() as session:
            quotas.set_quota(session, principal, get_project(session, project), body.flavour,
                             body.limit, self.clock.now())
        return self.project_quotas(principal, project)

    def remove_quota(self, principal: Principal, project: str, flavour: str
                     ) -> wr.ProjectQuotas:
        principal.require(Action.MANAGE_QUOTAS)
        with self._write() as session:
            quotas.remove_quota(session, principal, get_project(session, project), flavour,
                                self.clock.now())
        return self.project_quotas(principal, project)

    def set_auto_approve(self, principal: Principal, project: str, body: wr.AutoApproveSet
                         ) -> wr.ProjectQuotas:
        principal.require(Action.MANAGE_QUOTAS)
        with self._write() as session:
            quotas.set_auto_approve(session, principal, get_project(session, project),
                                    body.max_gpus, body.max_hours, self.clock.now())
        return self.project_quotas(principal, project)

    def remove_auto_approve(self, principal: Principal, project: str) -> wr.ProjectQuotas:
        principal.require(Action.MANAGE_QUOTAS)
        with self._write() as session:
            quotas.remove_auto_approve(session, principal, get_project(session, project),
                                       self.clock.now())
        return self.project_quotas(principal, project)

    # --- pools ---------------------------------------------------------------------------
    def request_pool(self, principal: Principal, body: wr.PoolCreate) -> wr.PoolView:
        with self._write() as session:
            pool = pools.request_pool(session, principal, body, self.clock.now())
            return pools.pool_view(session, pool)

    def list_pools(self, principal: Principal, *, project: str | None, state: str | None,
                   cursor: str | None, limit: int) -> Page[wr.PoolView]:
        with self.store.read() as session:
            rows, next_cursor = pools.list_pools(session, principal, project=project,
                                                 state=state, cursor=cursor, limit=limit)
            return Page[wr.PoolView](items=[pools.pool_view(session, p) for p in rows],
                                     next_cursor=next_cursor)

    def show_pool(self, principal: Principal, code: str) -> wr.PoolView:
        principal.require(Action.READ_REQUESTS)
        with self.store.read() as session:
            return pools.pool_view(session, pools.get_pool(session, principal, code))

    def approve_pool(self, principal: Principal, code: str, reason: str | None
                     ) -> wr.PoolView:
        with self._write() as session:
            return pools.pool_view(session, pools.approve_pool(session, principal, code,
                                                               self.clock.now(), reason))

    def reject_pool(self, principal: Principal, code: str, reason: str | None) -> wr.PoolView:
        with self._write() as session:
            return pools.pool_view(session, pools.reject_pool(session, principal, code,
                                                              self.clock.now(), reason))

    def end_pool(self, principal: Principal, code: str, reason: str | None) -> wr.PoolView:
        with self._write() as session:
            pool_id = pools.end_pool(session, principal, code, self.clock.now(), reason).id
        self.grant_waiting()  # its reservation is free: the queue may be waiting for it
        with self.store.read() as session:
            return pools.pool_view(session, session.get(Pool, pool_id))
