"""The services' one front door: each method is one use case in one transaction.

`Gpufleet` holds the state store, the clock and the settings; the API, the background loops
and the demo call its methods and nothing else. Reads run on a read snapshot, writes
through the store's single write path.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from gpufleet import __version__
from gpufleet.clock import Clock, SystemClock
from gpufleet.domain.access import Action, Role
from gpufleet.domain.billing.charges import Window
from gpufleet.domain.errors import Conflict, InvalidInput, Unauthenticated, Unavailable
from gpufleet.domain.inventory import GpuHealth, NodeStatus
from gpufleet.domain.operations.alert_state import FlapPolicy
from gpufleet.domain.operations.health_rules import default_pack
from gpufleet.domain.operations.rules import Rule
from gpufleet.services.access import audit, people, tokens
from gpufleet.services.access.principal import Principal
from gpufleet.services.access.principal_cache import PrincipalCache
from gpufleet.services.billing import rates as billing_rates
from gpufleet.services.billing import showback
from gpufleet.services.billing.statements import BillingStatements
from gpufleet.services.chatops.desk import ChatOps
from gpufleet.services.chatops.notifier import ChatNotifier
from gpufleet.services.inventory import environments, fleet, gpus, mig_configs, nodes, registration
from gpufleet.services.lifecycle import binding_history, lost_units
from gpufleet.services.lifecycle.lifecycle import Lifecycle
from gpufleet.services.operations import (
    alert_queries,
    alert_rules,
    alerts,
    event_subscriptions,
    events,
    health,
    mig_health,
    outbox_metrics,
    receiver_admin,
    rule_evaluation,
    silences,
)
from gpufleet.services.operations.event_publisher import EventPublisher
from gpufleet.services.operations.reclaim_desk import ReclamationDesk
from gpufleet.services.operations.rule_evaluation import EvaluationResult
from gpufleet.services.operations.sender import OutboxSender, Round
from gpufleet.services.paging import decode_cursor, encode_cursor
from gpufleet.services.telemetry import server_metrics
from gpufleet.services.telemetry.ingest import TelemetryIngest
from gpufleet.services.telemetry.queries import TelemetryQueries
from gpufleet.services.telemetry.store import open_telemetry_store
from gpufleet.settings import Settings, describe_settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import User
from gpufleet.tsdb import TelemetryStore
from gpufleet.tsdb.masks import RecordedInEngine
from gpufleet.wire import inventory as wi
from gpufleet.wire import receivers as wr
from gpufleet.wire.agent import Heartbeat, HeartbeatReply, NodeRegistration, RegistrationReply
from gpufleet.wire.alert_rules import AlertRuleView, ObservationView, RuleTestReply
from gpufleet.wire.alerts import AlertAck, AlertHistoryView, AlertView, SilenceCreate, SilenceView
from gpufleet.wire.base import Page
from gpufleet.wire.billing import RateEnd, RateSet, RateView, StatementsView
from gpufleet.wire.events import EventPage, EventSubscriptionCreate, EventSubscriptionView
from gpufleet.wire.health import GpuClear, GpuHealthClear, GpuHealthView
from gpufleet.wire.requests import GpuBindingView
from gpufleet.wire.server_settings import ServerSetting

log = logging.getLogger(__name__)


class Gpufleet:
    def __init__(self, store: StateStore, settings: Settings, clock: Clock | None = None, *,
                 telemetry: TelemetryStore | None = None):
        """`telemetry`: the telemetry store; None opens an in-memory embedded one on first
        use (what tests and tools that never touch telemetry want). The server passes the
        one its settings name (`open_telemetry_store`)."""
        self.store = store
        self.settings = settings
        self._settings_described = describe_settings(settings)
        self.clock = clock or SystemClock()
        self.lifecycle = Lifecycle(store, settings, self.clock)
        self.principals = PrincipalCache(timedelta(seconds=settings.token_cache_s))
        self._telemetry = telemetry
        self._telemetry_lock = threading.Lock()
        self.queries = TelemetryQueries(store, lambda: self.telemetry, settings, self.clock)
        self.ingest = TelemetryIngest(store, lambda: self.telemetry, settings, self.clock)
        # Every audit event becomes an event, sent to its subscribers in its own transaction.
        self.event_publisher = EventPublisher.for_store(store, settings.event_subscription_cache_s)
        self.event_bell = self.event_publisher.bell
        # What the alert loop evaluates each round (the rule evaluator, wired by whoever
        # owns the rules); None: rounds only tell what falls due (repeats, expiries).
        self.alert_evaluator: Callable[[datetime], alerts.AlertEvaluation] | None = None
        self.reclaim = ReclamationDesk(store, self.queries, self.lifecycle, settings, self.clock)
        self.outbox_sender = OutboxSender(store, settings, self.clock)
        # Approvals and requesters' threads in Slack (docs/chatops.md); idle without a token.
        self.chat_notifier = ChatNotifier(store, settings, self.clock)
        self._health_pack = default_pack(health.thresholds(settings))
        self._mig_rule = health.mig_rule(settings)
        self.chatops = ChatOps(store, settings, self.clock)  # docs/chatops.md
        self.billing = BillingStatements(
            store, self.queries, self.clock,
            showback_refresh_s=settings.billing_showback_refresh_s)  # /metrics' cost series

    @property
    def telemetry(self) -> TelemetryStore:
        if self._telemetry is None:
            with self._telemetry_lock:
                if self._telemetry is None:
                    self._telemetry = open_telemetry_store(self.settings, in_memory=True)
        return self._telemetry

    def telemetry_upkeep(self) -> None:
        """Fold closed minutes and hours into the rollups, then drop what retention ends.

        Minutes are folded `telemetry_rollup_grace_s` after they close, so samples a spool
        replays a little late still count in the rollups. With a Prometheus-compatible
        store both are the engine's own business and this does nothing.
        """
        now = self.clock.now()
        self.telemetry.rollup(now - timedelta(seconds=self.settings.telemetry_rollup_grace_s))
        self.telemetry.apply_retention(now)
        # Fold the new minutes into the funnel's minute masks here, not in the next
        # request (the first fold after a start reads every kept minute).
        with contextlib.suppress(Unavailable):  # a store the masks cannot read
            masks = self.queries.masks
            if isinstance(masks, RecordedInEngine):
                masks.upkeep_refresh()  # less often while no question comes
            else:
                masks.refresh()
            self.queries.warm_recent_funnels()
            self.queries.warm_recent_idle()
            self._record_mask_hours()  # last: the pages' answers do not wait for it
        self.billing.warm_asked_windows()  # statements asked lately, kept up to date
        self.billing.warm_showback()  # this month's, for the gpufleet_cost_* series

    def _record_mask_hours(self) -> None:
        """On a store that records its closed hours' masks in its engine (VictoriaMetrics:
        tsdb/prometheus_masks.py), the leader replica records them, so that the others —
        and one starting cold — read a few numbers per unit-hour instead of computing."""
        masks = self.queries.masks
        if not isinstance(masks, RecordedInEngine):
            return
        with self.store.read() as session:  # the lock lasts while the recording does
            if self.store.try_leader_lock(session, "telemetry-masks"):
                masks.record_closed_hours()

    def close_telemetry(self) -> None:
        """Close the telemetry store, if one was opened (the state store stays open)."""
        with self._telemetry_lock:
            if self._telemetry is not None:
                self._telemetry.close()
                self._telemetry = None

    def close(self) -> None:
        """Close the telemetry store and the state store's connections."""
        self.outbox_sender.close()
        self.close_telemetry()
        self.store.dispose()

    # --- identity ------------------------------------------------------------------------
    def cached_principal(self, raw_token: str) -> Principal | None:
        """The caller of a token found valid within `token_cache_s`, without I/O; None when
        it must be read (`authenticate`)."""
        return self.principals.get(raw_token, self.clock.now())

    def authenticate(self, raw_token: str) -> Principal:
        cached = self.cached_principal(raw_token)
        if cached is not None:
            return cached
        now = self.clock.now()
        with self.store.read() as session:
            token = tokens.find_api_token(session, raw_token, now)
            principal = tokens.principal_for(session, token)
            stale = tokens.needs_last_used_update(token, now)
            expires_at = token.expires_at
        if stale:
            with self.store.write() as session:
                tokens.touch(session, token.id, now)
        self.principals.put(raw_token, principal, now, expires_at)
        return principal

    def ensure_admin_token(self, current: str | None) -> str:
        """`current` while it is a valid admin token, otherwise a new one for user `admin`.

        Restarts keep the bootstrap token rather than churn it; an expired or revoked one
        is replaced (the first start has none).
        """
        if current:
            try:
                if self.authenticate(current).role is Role.ADMIN:
                    return current
            except Unauthenticated:
                pass
            log.warning("the stored admin token is no longer valid; issuing a new one")
        try:
            return self._issue_admin_token()
        except Conflict:  # a replica started beside this one created user `admin` first
            return self._issue_admin_token()

    def _issue_admin_token(self) -> str:
        now = self.clock.now()
        with self.store.write() as session:
            user = session.query(User).filter_by(name="admin").one_or_none()
            if user is None:
                user = User(name="admin", role=Role.ADMIN.value, display_name="Administrator",
                            created_at=now)
                session.add(user)
                session.flush()
            raw, token = tokens.issue_api_token(
                session, name="bootstrap admin", role=Role.ADMIN, created_by="system", now=now,
                ttl=timedelta(days=self.settings.api_token_ttl_days), user=user)
            audit.record(session, at=now, actor="system", action="token.created",
                         subject_kind="token", subject=str(token.id), role="admin",
                         name="bootstrap admin")
        return raw

    def ready(self) -> None:
        """Raise `Unavailable` unless the state store answers."""
        self.store.ping()

    def whoami(self, principal: Principal) -> wi.WhoAmI:
        return wi.WhoAmI(role=principal.role, actor=principal.actor, user=principal.user_name,
                         node=principal.node_name, projects=sorted(principal.project_names))

    def create_token(self, principal: Principal, body: wi.TokenCreate) -> wi.TokenIssued:
        with self.store.write() as session:
            return tokens.create_token(session, principal, body, self.clock.now(),
                                       self.settings.api_token_ttl_days)

    def list_tokens(self, principal: Principal, f: tokens.TokenFilter, cursor: str | None,
                    limit: int) -> Page[wi.TokenView]:
        with self.store.read() as session:
            return tokens.list_tokens(session, principal, f, cursor, limit)

    def revoke_token(self, principal: Principal, token_id: int,
                     reason: str | None) -> wi.TokenView:
        with self.store.write() as session:
            revoked = tokens.revoke_token(session, principal, token_id, self.clock.now(),
                                          reason)
        self.principals.clear()
        return revoked

    # --- people and projects -------------------------------------------------------------
    def create_user(self, principal: Principal, body: wi.UserCreate) -> wi.UserView:
        with self.store.write() as session:
            return people.create_user(session, principal, body, self.clock.now())

    def list_users(self, principal: Principal, cursor: str | None,
                   limit: int) -> Page[wi.UserView]:
        with self.store.read() as session:
            return people.list_users(session, principal, cursor, limit)

    def create_project(self, principal: Principal, body: wi.ProjectCreate) -> wi.ProjectView:
        with self.store.write() as session:
            return people.create_project(session, principal, body, self.clock.now())

    def list_projects(self, principal: Principal, cursor: str | None,
                      limit: int) -> Page[wi.ProjectView]:
        with self.store.read() as session:
            return people.list_projects(session, principal, cursor, limit)

    def show_project(self, principal: Principal, name: str) -> wi.ProjectView:
        with self.store.read() as session:
            return people.show_project(session, principal, name)

    def add_project_member(self, principal: Principal, project: str,
                           body: wi.ProjectMemberAdd) -> wi.ProjectView:
        with self.store.write() as session:
            view = people.add_member(session, principal, project, body, self.clock.now())
        self.principals.clear()  # a remembered caller's projects may have grown
        return view

    # --- environments and join tokens ----------------------------------------------------
    def create_environment(self, principal: Principal,
                           body: wi.EnvironmentCreate) -> wi.EnvironmentView:
        with self.store.write() as session:
            return environments.create_environment(session, principal, body, self.clock.now())

    def list_environments(self, principal: Principal, cursor: str | None,
                          limit: int) -> Page[wi.EnvironmentView]:
        with self.store.read() as session:
            return environments.list_environments(session, principal, cursor, limit)

    def show_environment(self, principal: Principal, name: str) -> wi.EnvironmentView:
        with self.store.read() as session:
            return environments.show_environment(session, principal, name)

    def create_join_tokens(self, principal: Principal,
                           body: wi.JoinTokenCreate) -> wi.JoinTokensIssued:
        with self.store.write() as session:
            return environments.create_join_tokens(session, principal, body, self.clock.now(),
                                                   self.settings.join_token_ttl_s)

    # --- agents --------------------------------------------------------------------------
    def register_node(self, raw_token: str, body: NodeRegistration) -> RegistrationReply:
        now = self.clock.now()
        try:
            with self.store.write() as session:
                caller = registration.identify_caller(session, raw_token, now)
                reply = registration.register(
                    session, caller, body, now,
                    token_ttl=None, heartbeat_interval_s=self.settings.heartbeat_interval_s)
            self.principals.clear()  # registering may have replaced the node's credential
            self.lifecycle.placement.mark_stale([reply.node])
            self.lifecycle.shape.invalidate()  # its GPUs, models or modes may be new
            self.ingest.forget_node(reply.node)
            return reply
        except registration.GpuClaimConflict as conflict:
            with self.store.write() as session:
                registration.mark_claims_suspect(session, conflict, body.machine_id, now)
            raise registration.claim_conflict_error(conflict) from None
        except registration.JoinRefused as refused:
            with self.store.write() as session:
                registration.record_join_refusal(session, refused, caller.join_token_id, now)
            raise refused.error from None

    def heartbeat(self, principal: Principal, body: Heartbeat) -> HeartbeatReply:
        with self.store.write() as session:
            reply = registration.heartbeat(session, principal, body, self.clock.now(),
                                           self.settings.heartbeat_interval_s)
        self.lifecycle.placement.observe_node(reply.node, reply.node_status is NodeStatus.READY)
        return reply

    def mark_silent_nodes_unreachable(self) -> list[str]:
        with self.store.write() as session:
            if not self.store.try_leader_lock(session, "silent-nodes"):
                return []
            silent = nodes.mark_silent_nodes_unreachable(
                session, self.clock.now(), self.settings.heartbeat_interval_s,
                self.settings.unreachable_after_missed_heartbeats)
        self.lifecycle.placement.mark_stale(silent)
        return silent

    # --- inventory -----------------------------------------------------------------------
    def fleet_summary(self, principal: Principal) -> wi.FleetSummary:
        with self.store.read() as session:
            return fleet.summary(session, principal)

    def server_settings(self, principal: Principal) -> list[ServerSetting]:
        """The settings this server runs with and where each came from, as described when
        it started (an environment or config file changed since does not change them)."""
        principal.require(Action.READ_SERVER_SETTINGS)
        return [ServerSetting(name=v.name, source=v.source, description=v.description,
                              value=v.value if v.value is None or isinstance(
                                  v.value, bool | int | float | str) else str(v.value))
                for v in self._settings_described]

    def server_metrics(self, principal: Principal) -> list[server_metrics.Family]:
        """Everything the server's Prometheus `/metrics` shows: the fleet's state, the
        funnel by environment, what telemetry ingest has done since start, and showback
        (this month's statement as the upkeep keeps it, never computed here). Not for
        members: it shows every project's allocations (`metrics:read`)."""
        principal.require(Action.READ_FLEET_METRICS)
        with self.store.read() as session:
            families = server_metrics.gather(session, principal, self.clock.now())
            families += outbox_metrics.families(session, self.clock.now())
            # Showback: kept by the upkeep, never computed in a scrape (docs/billing.md).
            families += showback.families(self.billing.showback, billing_rates.rate_card(
                session), self.clock.now())
        # A telemetry store without funnel queries leaves the state gauges to count alone.
        with contextlib.suppress(Unavailable):
            families += server_metrics.funnel_families(
                self.queries.funnel_by_environment(principal))
        return families + server_metrics.ingest_families(self.ingest.counters)

    def list_gpus(self, principal: Principal, f: fleet.GpuFilter, sort: str,
                  cursor: str | None, limit: int) -> Page[wi.GpuView]:
        with self.store.read() as session:
            return fleet.list_gpus(session, principal, f, sort, cursor, limit)

    def get_gpu(self, principal: Principal, uuid: str) -> wi.GpuView:
        with self.store.read() as session:
            return fleet.get_gpu(session, principal, uuid)

    def gpu_bindings(self, principal: Principal, uuid: str, cursor: str | None,
                     limit: int) -> Page[GpuBindingView]:
        """The GPU's allocation history: its units' bindings, newest first."""
        with self.store.read() as session:
            return binding_history.gpu_bindings(session, principal, uuid, cursor, limit)

    def set_gpu_health(self, principal: Principal, uuid: str,
                       body: wi.GpuHealthChange) -> wi.GpuView:
        now = self.clock.now()
        with self.store.write() as session:
            principal.require(Action.MANAGE_INVENTORY)
            previous = health.health_of(session, uuid)
            holders = health.holders_of(session, uuid) \
                if body.health is GpuHealth.QUARANTINED else []
            canonical = gpus.set_health(session, principal, uuid, body, now)
            if body.health is GpuHealth.QUARANTINED:
                lost_units.gpu_quarantined(session, canonical, principal.actor, now,
                                           body.reason)
            health.record_manual(session, canonical, previous, holders, principal.actor,
                                 body.reason, now)
        view = self.get_gpu(principal, canonical)
        self.lifecycle.placement.mark_stale([view.node])
        self.lifecycle.shape.invalidate()  # a quarantined GPU is no longer capacity
        return view

    # --- GPU health (docs/operations.md, "GPU health and quarantine") -------------------
    def gpu_health(self, principal: Principal, uuid: str) -> GpuHealthView:
        with self.store.read() as session:
            return health.read(session, principal, uuid)

    def clear_gpu(self, principal: Principal, uuid: str, body: GpuHealthClear
                  ) -> GpuHealthView:
        """Return a suspect or quarantined GPU, or one MIG instance of it, to service (409
        when it is healthy)."""
        with self.store.write() as session:
            if body.mig_instance is not None:
                node = mig_health.clear(session, principal, uuid, body.mig_instance,
                                        body.reason, self.clock.now())
            else:
                node = health.clear(session, principal, uuid, body.reason, self.clock.now())
        self.lifecycle.placement.mark_stale([node])
        self.lifecycle.shape.invalidate()  # a cleared GPU is capacity again
        return self.gpu_health(principal, uuid)

    def retire_gpu(self, principal: Principal, uuid: str, body: GpuClear) -> GpuHealthView:
        """Retire a quarantined GPU for good (409 for any other state)."""
        with self.store.write() as session:
            node = health.retire(session, principal, uuid, body.reason, self.clock.now())
        self.lifecycle.placement.mark_stale([node])
        self.lifecycle.shape.invalidate()
        return self.gpu_health(principal, uuid)

    def evaluate_gpu_health(self) -> list[tuple[str, str, str, str | None]]:
        """One evaluation of the health rules over the fleet (the server's health loop):
        the moves made, as (GPU or MIG UUID, from, to, rule), the GPUs' first. Any replica
        may read and plan; only the leader applies, re-checking each GPU and instance, so
        running it twice moves nothing twice."""
        now = self.clock.now()
        window = timedelta(seconds=self.settings.health_window_s)
        hold = timedelta(seconds=self.settings.health_suspect_hold_s)
        with self.store.read() as session:
            planned = health.plan(session, self.telemetry, self._health_pack, now, window,
                                  hold)
            instances = mig_health.plan(session, self.telemetry, self._mig_rule, now,
                                        window, hold)
        if not planned and not instances:
            return []
        with self.store.write() as session:
            if not self.store.try_leader_lock(session, "gpu-health"):
                return []
            result = health.apply(session, planned, now)
            moves, nodes = mig_health.apply(session, instances, health.EVALUATOR, now)
            result.moves += moves
            result.nodes |= nodes
        if result.nodes:
            self.lifecycle.placement.mark_stale(sorted(result.nodes))
            self.lifecycle.shape.invalidate()  # quarantined GPUs are no longer capacity
        return result.moves

    def approve_gpu_move(self, principal: Principal, uuid: str,
                         body: wi.GpuMoveApprovalCreate) -> wi.GpuMoveApprovalView:
        with self.store.write() as session:
            approval = gpus.approve_move(session, principal, uuid, body, self.clock.now())
        self.lifecycle.placement.mark_all_stale()  # the GPU may turn up on another node
        self.lifecycle.shape.invalidate()
        return approval

    def list_nodes(self, principal: Principal, f: fleet.NodeFilter, sort: str,
                   cursor: str | None, limit: int) -> Page[wi.NodeView]:
        with self.store.read() as session:
            return fleet.list_nodes(session, principal, f, sort, cursor, limit)

    def get_node(self, principal: Principal, name: str) -> wi.NodeDetail:
        with self.store.read() as session:
            return fleet.get_node_detail(session, principal, name)

    def change_node(self, principal: Principal, name: str, action: str,
                    reason: str | None) -> wi.NodeDetail:
        change = {"cordon": nodes.cordon, "uncordon": nodes.uncordon, "retire": nodes.retire}
        now = self.clock.now()
        with self.store.write() as session:
            node = change[action](session, principal, name, now, reason)
            if action == "retire":
                lost_units.node_retired(session, node.id, principal.actor, now, reason)
        self.principals.clear()  # retiring a node revokes its credential
        self.lifecycle.placement.mark_stale([name])
        self.lifecycle.shape.invalidate()  # a retired node's GPUs are no longer capacity
        return self.get_node(principal, name)

    def audit_events(self, principal: Principal, *, subject_kind: str | None,
                     subject: str | None, action: str | None, cursor: str | None,
                     limit: int) -> Page[wi.AuditEventView]:
        principal.require(Action.READ_AUDIT)
        before_id = decode_cursor(cursor, 1)[0] if cursor else None
        if before_id is not None and (type(before_id) is not int
                                      or not 0 <= before_id < 2**63):
            raise InvalidInput("the cursor is not one this server issued",
                               code="invalid_cursor", details={"cursor": cursor})
        with self.store.read() as session:
            events = audit.list_events(session, subject_kind=subject_kind, subject=subject,
                                       action=action, before_id=before_id, limit=limit + 1)
            items = [wi.AuditEventView.model_validate(e) for e in events[:limit]]
        next_cursor = encode_cursor([items[-1].id]) if len(events) > limit else None
        return Page[wi.AuditEventView](items=items, next_cursor=next_cursor)

    # --- events (docs/operations.md, "Events") -------------------------------------------
    def events_page(self, principal: Principal, wanted: events.EventFilter, after: int | None,
                    limit: int) -> EventPage:
        """Events after `after` that `principal` may see, oldest first; None: from the
        first event."""
        principal.require(Action.READ_EVENTS)
        after = 0 if after is None else after
        with self.store.read() as session:
            rows = events.list_events(session, principal, wanted, after, limit + 1)
            items = [events.to_event(r) for r in rows[:limit]]
        last_id = items[-1].id if items else after
        return EventPage(items=items, last_id=last_id,
                         next_cursor=str(last_id) if len(rows) > limit else None)

    def latest_event_id(self, principal: Principal) -> int:
        """Where a reader that wants only what happens from now on starts."""
        principal.require(Action.READ_EVENTS)
        with self.store.read() as session:
            return events.latest_event_id(session)

    def create_event_subscription(self, principal: Principal,
                                  body: EventSubscriptionCreate) -> EventSubscriptionView:
        with self.store.write() as session:
            view = event_subscriptions.create(session, principal, body, self.clock.now())
        self.event_publisher.subscribers.invalidate()  # after the commit: seen at once
        return view

    def list_event_subscriptions(self, principal: Principal, cursor: str | None,
                                 limit: int) -> Page[EventSubscriptionView]:
        with self.store.read() as session:
            return event_subscriptions.list_subscriptions(session, principal, cursor, limit)

    def delete_event_subscription(self, principal: Principal, name: str) -> None:
        with self.store.write() as session:
            event_subscriptions.delete(session, principal, name, self.clock.now())
        self.event_publisher.subscribers.invalidate()

    # --- MIG configs for operators -------------------------------------------------------
    def export_mig_configs(self, principal: Principal, *, node: str | None,
                           environment: str | None) -> mig_configs.MigConfigExport:
        """The selected nodes' MIG layouts as a mig-parted config (pins no placements)."""
        with self.store.read() as session:
            return mig_configs.export(session, principal, node=node, environment=environment,
                                      now=self.clock.now(), generator=f"gpufleet {__version__}")

    # --- alerts (docs/operations.md, "Alert lifecycle") -----------------------------------
    def _alert_policy(self) -> alerts.AlertPolicy:
        return alerts.AlertPolicy(
            flap=FlapPolicy(self.settings.alert_flap_window_s,
                            self.settings.alert_flap_max_changes),
            repeat_interval_s=self.settings.alert_repeat_interval_s)

    def record_alert_evaluation(self, evaluation: alerts.AlertEvaluation,
                                now: datetime | None = None
                                ) -> alerts.EvaluationOutcome | None:
        """Apply one evaluation of the alert rules, leader-locked (None when another
        replica leads this round). Idempotent: the same evaluation at the same time
        changes nothing more and tells nobody twice."""
        now = now or self.clock.now()
        with self.store.write() as session:
            if not self.store.try_leader_lock(session, "alerts"):
                return None
            return alerts.apply_evaluation(session, evaluation, now, self._alert_policy())

    def alert_round(self) -> alerts.EvaluationOutcome | None:
        """One round of the alert loop: evaluate the rules (`alert_evaluator`, read-only,
        outside the write transaction), then record what it saw."""
        now = self.clock.now()
        evaluation = (self.alert_evaluator(now) if self.alert_evaluator
                      else alerts.AlertEvaluation())
        outcome = self.record_alert_evaluation(evaluation, now)
        if outcome is not None:
            self.forget_resolved_alerts(now)
        return outcome

    def forget_resolved_alerts(self, now: datetime | None = None) -> int:
        """Delete alerts resolved more than `alert_resolved_retention_days` ago, with
        their history (leader-locked; 0 when another replica leads)."""
        now = now or self.clock.now()
        before = now - timedelta(days=self.settings.alert_resolved_retention_days)
        with self.store.write() as session:
            if not self.store.try_leader_lock(session, "alerts"):
                return 0
            return alerts.forget_resolved(session, before)

    def list_alerts(self, principal: Principal, f: alert_queries.AlertFilter,
                    cursor: str | None, limit: int) -> Page[AlertView]:
        with self.store.read() as session:
            return alert_queries.list_alerts(session, principal, f, cursor, limit)

    def get_alert(self, principal: Principal, fingerprint: str) -> AlertView:
        with self.store.read() as session:
            return alert_queries.view(alert_queries.find(session, principal, fingerprint))

    def acknowledge_alert(self, principal: Principal, fingerprint: str,
                          body: AlertAck) -> AlertView:
        with self.store.write() as session:
            return alert_queries.acknowledge(session, principal, fingerprint, body,
                                             self.clock.now())

    def alert_history(self, principal: Principal, *, fingerprint: str | None,
                      rule: str | None, cursor: str | None,
                      limit: int) -> Page[AlertHistoryView]:
        with self.store.read() as session:
            return alert_queries.history(session, principal, fingerprint=fingerprint,
                                         rule=rule, cursor=cursor, limit=limit)

    def create_silence(self, principal: Principal, body: SilenceCreate) -> SilenceView:
        with self.store.write() as session:
            return silences.create_silence(session, principal, body, self.clock.now())

    def list_silences(self, principal: Principal, *, include_expired: bool,
                      cursor: str | None, limit: int) -> Page[SilenceView]:
        with self.store.read() as session:
            return silences.list_silences(session, principal, self.clock.now(),
                                          include_expired=include_expired, cursor=cursor,
                                          limit=limit)

    def expire_silence(self, principal: Principal, silence_id: int) -> SilenceView:
        with self.store.write() as session:
            return silences.expire_silence(session, principal, silence_id, self.clock.now())
    # --- notifications: receivers, the outbox sender, the inbox --------------------------
    def send_notifications(self) -> Round:
        """One round of the outbox sender (the server's outbox loop): claims what is due
        and hands it to the receivers' workers without waiting for them. Safe on every
        replica at once: claims are row locks (docs/operations.md, "The outbox")."""
        return self.outbox_sender.dispatch()

    def create_receiver(self, principal: Principal, body: wr.ReceiverCreate) -> wr.ReceiverView:
        with self.store.write() as session:
            return receiver_admin.create_receiver(session, principal, body, self.clock.now())

    def list_receivers(self, principal: Principal, cursor: str | None,
                       limit: int) -> Page[wr.ReceiverView]:
        with self.store.read() as session:
            return receiver_admin.list_receivers(session, principal, cursor, limit)

    def show_receiver(self, principal: Principal, name: str) -> wr.ReceiverView:
        with self.store.read() as session:
            return receiver_admin.show_receiver(session, principal, name)

    def update_receiver(self, principal: Principal, name: str,
                        body: wr.ReceiverUpdate) -> wr.ReceiverView:
        with self.store.write() as session:
            view = receiver_admin.update_receiver(session, principal, name, body,
                                                  self.clock.now())
        # A subscription is a receiver: enabled or re-routed, seen at once by this server.
        self.event_publisher.subscribers.invalidate()
        return view

    def delete_receiver(self, principal: Principal, name: str) -> wr.ReceiverView:
        with self.store.write() as session:
            return receiver_admin.delete_receiver(session, principal, name, self.clock.now())

    def test_receiver(self, principal: Principal, name: str) -> wr.TestQueued:
        with self.store.write() as session:
            return receiver_admin.queue_test(session, principal, name, self.clock.now())

    def receiver_deliveries(self, principal: Principal, name: str, cursor: str | None,
                            limit: int) -> Page[wr.DeliveryView]:
        with self.store.read() as session:
            return receiver_admin.list_deliveries(session, principal, name, cursor, limit)

    def list_notifications(self, principal: Principal, cursor: str | None,
                           limit: int) -> Page[wr.NotificationView]:
        with self.store.read() as session:
            return receiver_admin.list_inbox(session, principal, cursor, limit)
    # --- rate cards (docs/billing.md, "Rate cards, stored") -----------------------------
    def list_billing_rates(self, principal: Principal, *, flavour: str | None = None,
                           environment: str | None = None,
                           at: datetime | None = None) -> list[RateView]:
        with self.store.read() as session:
            return billing_rates.list_rates(session, principal, flavour=flavour,
                                            environment=environment, at=at)

    def set_billing_rate(self, principal: Principal, body: RateSet) -> RateView:
        with self.store.write() as session:
            return billing_rates.set_rate(session, principal, body, self.clock.now())

    def end_billing_rate(self, principal: Principal, rate_id: int, body: RateEnd) -> RateView:
        with self.store.write() as session:
            return billing_rates.end_rate(session, principal, rate_id, body, self.clock.now())

    # --- statements (docs/billing.md, "Statements from the store") -----------------------
    def billing_statements(self, principal: Principal, window: Window, *,
                           project: str | None = None, by: str = "project",
                           group: str | None = None) -> StatementsView:
        """Statements for `window` (its end cut at now) as the caller may see them: per
        project or rolled up `by` organisation / department / cost centre, each row broken
        down by `group` (model / profile / environment / flavour) when asked."""
        return self.billing.view(principal, window, project=project, by=by, group=group)

    # --- alert rules (docs/operations.md, "Alert rules") ---------------------------------
    def list_alert_rules(self, principal: Principal) -> list[AlertRuleView]:
        with self.store.read() as session:
            return alert_rules.list_rules(session, principal)

    def get_alert_rule(self, principal: Principal, name: str) -> AlertRuleView:
        with self.store.read() as session:
            return alert_rules.get_rule(session, principal, name)

    def put_alert_rule(self, principal: Principal, name: str, body: dict) -> AlertRuleView:
        with self.store.write() as session:
            return alert_rules.put_rule(session, principal, name, body, self.clock.now())

    def delete_alert_rule(self, principal: Principal, name: str) -> None:
        with self.store.write() as session:
            alert_rules.delete_rule(session, principal, name, self.clock.now())

    def alert_rules_in_effect(self) -> list[Rule]:
        """The rules the alert evaluation runs: the default pack, stored rules laid over."""
        with self.store.read() as session:
            return alert_rules.rules_in_effect(session)

    def evaluate_alert_rules(self, rules: list[Rule] | None = None) -> EvaluationResult:
        """One evaluation of `rules` (None: the rules in effect) at the clock's now: what
        each rule observes; the alert state machine applies `for` and tells people."""
        return rule_evaluation.evaluate(
            self.queries, self.alert_rules_in_effect() if rules is None else rules,
            self.clock.now())

    def alert_evaluation(self, now: datetime) -> alerts.AlertEvaluation:
        """One evaluation of the rules in effect, as the alert state takes it: the enabled
        rules are the whole rule set (`rules_complete`), so the alerts of a rule deleted
        or switched off resolve; a rule whose source did not answer is not `evaluated`,
        so its alerts keep their state (docs/operations.md, "Alert lifecycle")."""
        rules = [r for r in self.alert_rules_in_effect() if r.enabled]
        result = rule_evaluation.evaluate(self.queries, rules, now)
        return alerts.AlertEvaluation(rules=rules, evaluated=frozenset(result.evaluated),
                                      observations=result.observations, rules_complete=True)

    def test_alert_rules(self, principal: Principal, body: dict) -> RuleTestReply:
        """What the rules of a rule file (sent as JSON) would observe now; nothing is
        stored or told. Members see observations about their own projects only."""
        principal.require(Action.READ_ALERT_RULES)
        principal.require(Action.READ_INVENTORY)
        rules = alert_rules.parse_rules_document(body)
        result = self.evaluate_alert_rules(rules)
        seen = [o for o in result.observations if principal.visible_projects is None or any(
            principal.sees_project(p) for p in
            (o.labels.get("project") or o.annotations.get("project") or "").split(",") if p)]
        return RuleTestReply(
            at=self.clock.now(), evaluated=result.evaluated, unavailable=result.unavailable,
            observations=[ObservationView(
                rule=o.rule, fingerprint=o.fingerprint, labels=dict(o.labels),
                annotations=dict(o.annotations), value=o.value, evidence=o.evidence, at=o.at)
                for o in seen])
