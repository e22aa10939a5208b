"""Reclamation's front door: the round (`Reclamation`), and the policies, exemptions,
warnings and report the API and the CLI ask for — one use case, one transaction each
(docs/operations.md, "Reclamation")."""

from __future__ import annotations

from gpufleet.domain.access import Action
from gpufleet.domain.operations.reclaim_policy import Scope
from gpufleet.domain.telemetry.durations import parse_duration
from gpufleet.services.access.people import get_project
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.environments import get_environment
from gpufleet.services.lifecycle import requests as lifecycle_requests
from gpufleet.services.lookup import not_found
from gpufleet.services.operations import exemptions, reclaim_policies, reclaim_report
from gpufleet.services.operations.reclaim_policies import PolicyBook
from gpufleet.services.operations.reclamation import Reclamation
from gpufleet.store.tables import GpuRequest
from gpufleet.wire.reclaim import (
    EffectivePolicyView,
    ExemptCreate,
    ExemptionView,
    PolicyList,
    PolicySet,
    PolicyView,
    ReclaimReport,
    WarningView,
)


class ReclamationDesk(Reclamation):
    """The round (inherited) and everything around it."""

    def list_policies(self, principal: Principal, scope: Scope | None = None) -> PolicyList:
        with self.store.read() as session:
            return reclaim_policies.list_policies(session, principal, self.default,
                                                  scope=scope)

    def set_policy(self, principal: Principal, scope: Scope, name: str,
                   body: PolicySet) -> PolicyView:
        with self.store.write() as session:
            row = reclaim_policies.set_policy(session, principal, scope, name, body,
                                              self.clock.now())
            return reclaim_policies.policy_view(row)

    def remove_policy(self, principal: Principal, scope: Scope, name: str) -> None:
        with self.store.write() as session:
            reclaim_policies.remove_policy(session, principal, scope, name, self.clock.now())

    def effective_policy(self, principal: Principal, project: str,
                         environment: str | None) -> EffectivePolicyView:
        principal.require(Action.READ_RECLAIM)
        with self.store.read() as session:
            get_project(session, project)  # 404 for a project that does not exist
            if not principal.sees_project(project):  # nor one a member may not see
                raise not_found("project", project)
            if environment is not None:
                get_environment(session, environment)
            book = PolicyBook(session, self.default)
        return reclaim_policies.effective_view(book.policy_for(project, environment))

    def exempt(self, principal: Principal, code: str, body: ExemptCreate) -> ExemptionView:
        with self.store.write() as session:
            row = exemptions.exempt(session, principal, code, body, self.clock.now())
            return exemptions.view(row, session.get(GpuRequest, row.request_id))

    def list_exemptions(self, principal: Principal, *,
                        include_expired: bool = False) -> list[ExemptionView]:
        with self.store.read() as session:
            return exemptions.list_exemptions(session, principal, self.clock.now(),
                                              include_expired=include_expired)

    def list_warnings(self, principal: Principal, *, open_only: bool,
                      allocation: str | None = None) -> list[WarningView]:
        with self.store.read() as session:
            allocation_id = None
            if allocation is not None:
                allocation_id = lifecycle_requests.get_request(session, principal,
                                                               allocation).id
            return reclaim_report.list_warnings(session, principal, open_only=open_only,
                                                allocation_id=allocation_id)

    def report(self, principal: Principal, window: str,
               project: str | None = None) -> ReclaimReport:
        span = parse_duration(window, name="window")
        until = self.clock.now()
        with self.store.read() as session:
            return reclaim_report.report(session, principal, until - span, until, project)
