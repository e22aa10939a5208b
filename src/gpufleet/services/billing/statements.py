"""Statements from the store (docs/billing.md, "Statements from the store"): bindings, pools,
projects and the rate card read into the domain's `statements`, with each binding's
activity from the funnel's own minute masks, then scoped to what the caller may see,
rolled up and grouped for the wire.

Computing a month at 100,000 bindings costs seconds (exact `Fraction`s), so every
project's statements for a window are kept. A closed window's are keyed by the window, the
inputs' change marker (sources.change_marker) and how far the masks have rolled up inside
it: a second call for the same window — any caller, any roll-up or grouping — reuses them
until a binding, pool, rate or project changes or more telemetry lands in the window. An
open window's (this month's) are reused for RECENT_S and recomputed by the upkeep loop
every REFRESH_S while asked; it brings every window asked lately up to date
(`warm_asked_windows`), so callers rarely wait for a computation. It also keeps this month's
for the `gpufleet_cost_*` series on /metrics (`warm_showback`, services/billing/showback.py).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from gpufleet.clock import Clock
from gpufleet.domain.access import Action
from gpufleet.domain.billing.charges import MICROS_PER_HOUR, BindingInterval, Window
from gpufleet.domain.billing.rates import RateCard
from gpufleet.domain.billing.statements import (
    Activity,
    ExactTotals,
    Group,
    Statement,
    Totals,
    statements,
)
from gpufleet.domain.errors import GpufleetError, InvalidInput, Unavailable
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.billing import sources
from gpufleet.services.billing.rates import rate_card
from gpufleet.services.billing.showback import Showback, ShowbackRow
from gpufleet.services.lookup import not_found
from gpufleet.services.telemetry.ownership import read_slots
from gpufleet.services.telemetry.queries import TelemetryQueries
from gpufleet.store.database import StateStore
from gpufleet.tsdb.protocol import to_ms
from gpufleet.wire.billing import (
    STATEMENT_BY,
    STATEMENT_GROUPS,
    StatementGroup,
    StatementRow,
    StatementsView,
    StatementTotals,
)

log = logging.getLogger(__name__)

MAX_WINDOW = timedelta(days=366)
KEPT_WINDOWS = 16
# An open window's answer is reused while its cut is at most RECENT_S old; the upkeep
# recomputes it once it is REFRESH_S old (a round is 60 s: one round's slack). A month at
# 100,000 bindings costs ~3.5 s of CPU (BENCHMARKS.md, "Billing statements"): every 5
# minutes, not every round, while someone asks for it.
RECENT_S = 360.0
REFRESH_S = 300.0
WARM_WHILE_ASKED = timedelta(minutes=15)
# Stands for "no rate card": the domain's card needs a currency; with no rates every
# charged hour is unpriced, and the wire says currency null.
_NO_CARD = RateCard("XXX")
_GROUP_READERS: dict[str, Callable[[Group], str | None]] = {
    "model": lambda g: g.model, "profile": lambda g: g.profile,
    "environment": lambda g: g.environment, "flavour": lambda g: g.flavour}


def month_window(month: str) -> Window:
    """`2026-11` → [2026-11-01, 2026-12-01) UTC; anything else a 400 naming it."""
    try:
        start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidInput(f"month '{month}' is not a month: write it as YYYY-MM (2026-11)",
                           code="invalid_month", details={"month": month}) from None
    end = start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1)
    return Window(start, end)


def asked_window(month: str | None, start: datetime | None, end: datetime | None, *,
                 now: datetime) -> Window:
    """A month, or a start and an end (no end: until now); neither: this month (UTC), what
    an operator asks most. 400 naming what is wrong."""
    if month is not None:
        if start is not None or end is not None:
            raise InvalidInput("give either month or start and end, not both",
                               code="invalid_window")
        return month_window(month)
    if start is None and end is None:
        return month_window(now.astimezone(UTC).strftime("%Y-%m"))
    if start is None:
        raise InvalidInput("a window with an end needs a start (or ask for a month: "
                           "month=YYYY-MM)", code="invalid_window")
    end = now if end is None else end
    if end <= start:
        raise InvalidInput(f"the window ends ({end.isoformat()}) before it starts "
                           f"({start.isoformat()})", code="invalid_window")
    if end - start > MAX_WINDOW:
        raise InvalidInput(f"a statement's window may span at most {MAX_WINDOW.days} days",
                           code="window_too_long")
    return Window(start, end)


@dataclass(frozen=True)
class Computed:
    """Every project's statement for one window, and the card's currency (None: none).

    Summing exact totals is not free either (a month's idle cost over 200 projects has a
    denominator of ~1.3 million bits at 100,000 bindings): each project's totals, per
    grouping, are summed once, sums over projects are `ExactTotals` (never reduced), and
    each view asked is kept with them."""

    window: Window
    currency: str | None
    statements: dict[str, Statement]
    _totals: dict = field(default_factory=dict, compare=False, repr=False)
    _views: dict = field(default_factory=dict, compare=False, repr=False)

    def totals(self, project: str) -> Totals:
        found = self._totals.get(project)
        if found is None:
            found = self._totals[project] = self.statements[project].totals
        return found

    def summed(self, names: list[str]) -> ExactTotals:
        """The projects' totals summed (unreduced): a view's total and a roll-up's row are
        often the same projects (every one, for an administrator)."""
        key = ("summed", tuple(names))
        found = self._totals.get(key)
        if found is None:
            found = self._totals[key] = ExactTotals.of(self.totals(n) for n in names)
        return found

    def grouped(self, project: str, group: str) -> dict[str | None, Totals]:
        key = (project, group)
        found = self._totals.get(key)
        if found is None:
            found = self._totals[key] = self.statements[project].by(_GROUP_READERS[group])
        return found


class BillingStatements:
    """Statements for any window, kept per window until their inputs change."""

    def __init__(self, store: StateStore, queries: TelemetryQueries, clock: Clock,
                 showback_refresh_s: float = 0.0):
        self.store = store
        self.queries = queries
        self.clock = clock
        # This month's statement for /metrics (`warm_showback`); 0: none kept.
        self.showback_refresh_s = showback_refresh_s
        self.showback: Showback | None = None
        self._showback_from: Computed | None = None
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, Computed] = OrderedDict()  # closed windows
        self._open: dict[Window, Computed] = {}  # open windows, by the window asked
        self._asked: dict[Window, datetime] = {}  # windows: when last asked
        self._view_keys: dict[Window, set[tuple]] = {}  # windows: the views asked of them

    def computed(self, window: Window, *, fresh: bool = False) -> Computed:
        """Every project's statement for `window`, its end cut at now (a window wholly
        after now is a 400 `window_in_future`).

        A closed window (ended before now) is kept until its inputs change. An open one
        (this month) is cut at the last whole minute and its answer reused while that cut
        is at most RECENT_S old — its `window_end` says as of when — as the dashboard's
        recent funnels are; the upkeep loop brings the windows asked lately up to date
        (`warm_asked_windows`), so a caller rarely waits. `fresh`: compute afresh."""
        now = self.clock.now()
        if window.start >= now:
            raise InvalidInput(f"the window starts at {window.start.isoformat()}, after now: "
                               "nothing has been held in it yet", code="window_in_future",
                               details={"window_start": window.start.isoformat()})
        if window.end <= now:
            return self._closed(window)
        minute = now.replace(second=0, microsecond=0)
        with self._lock:
            kept = None if fresh else self._open.get(window)
        if kept is not None and (now - kept.window.end).total_seconds() <= RECENT_S:
            return kept
        computed = self._compute(Window(window.start, minute if minute > window.start
                                        else now), self._masks_done())
        with self._lock:
            self._open[window] = computed
        return computed

    def warm_asked_windows(self) -> None:
        """Bring the windows asked in the last WARM_WHILE_ASKED up to date, so their next
        caller finds them kept: an open one is recomputed once its answer is REFRESH_S
        old, a closed one only when its inputs changed, and the views asked of each
        (scope, project, roll-up, grouping) are built on the fresh answer (the upkeep
        loop's work, once a round); forget the others — but this month's answer, which
        `warm_showback` keeps for /metrics whether asked or not."""
        now = self.clock.now()
        with self._lock:
            asked = {w: at for w, at in self._asked.items() if now - at <= WARM_WHILE_ASKED}
            self._asked = dict(asked)
            showback_month = None if self.showback_refresh_s <= 0 else \
                month_window(now.strftime("%Y-%m"))  # kept for /metrics, asked or not
            self._open = {w: c for w, c in self._open.items()
                          if w in asked or w == showback_month}
            view_keys = {w: set(self._view_keys.get(w, ())) for w in asked}
            self._view_keys = {w: self._view_keys[w] for w in asked if w in self._view_keys}
        for window in asked:
            try:
                if window.end > now:
                    kept = self._open.get(window)
                    stale = kept is None or \
                        (now - kept.window.end).total_seconds() > REFRESH_S
                    computed = self.computed(window, fresh=stale)
                else:
                    computed = self._closed(window)
                for key in view_keys[window]:  # the views asked of it, ready too
                    _kept_view(computed, key)
            except GpufleetError as exc:  # the caller asking next is told; the loop goes on
                log.warning("billing: warming the statement of %s to %s failed: %s",
                            window.start.isoformat(), window.end.isoformat(), exc)

    def warm_showback(self) -> None:
        """Keep this month's statement (UTC) for the `gpufleet_cost_*` series on /metrics
        (services/billing/showback.py), whether or not anyone asked for it: take the open
        month's kept answer when one is at most `showback_refresh_s` old — a caller asking
        for this month keeps it fresher at no extra cost — else compute it afresh (the
        upkeep loop's work, once a round; a scrape only reads `showback`)."""
        if self.showback_refresh_s <= 0:
            self.showback = self._showback_from = None
            return
        now = self.clock.now()
        month = month_window(now.strftime("%Y-%m"))
        with self._lock:
            kept = self._open.get(month)
        try:
            if kept is None or (now - kept.window.end).total_seconds() > \
                    self.showback_refresh_s:
                kept = self.computed(month, fresh=True)
        except GpufleetError as exc:  # the first instant of a month, a store that failed
            log.warning("billing: this month's statement for /metrics failed: %s", exc)
            return
        if kept is self._showback_from:
            return
        rows = tuple(ShowbackRow(name, st.project.organisation, st.project.department,
                                 st.project.cost_centre,
                                 totals_view(kept.totals(name), kept.currency))
                     for name, st in sorted(kept.statements.items()))
        self.showback = Showback(kept.window, kept.currency, rows)
        self._showback_from = kept

    def _closed(self, window: Window) -> Computed:
        done = self._masks_done()
        with self.store.read() as session:
            key = (window, sources.change_marker(session, window.end),
                   None if done is None else min(done, to_ms(window.end)))
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept
        computed = self._compute(window, done)
        with self._lock:
            self._kept[key] = computed
            while len(self._kept) > KEPT_WINDOWS:
                self._kept.popitem(last=False)
        return computed

    def _compute(self, window: Window, done: int | None) -> Computed:
        with _no_collections():
            return self._computed_now(window, done)

    def _computed_now(self, window: Window, done: int | None) -> Computed:
        with self.store.read() as session:
            bindings = sources.binding_intervals(session, window.start, window.end)
            pools = sources.pool_intervals(session)
            projects = sources.project_infos(session)
            card = rate_card(session)
            activity = {} if done is None else \
                self._activity(session, bindings, window)
        # The charge lines are not made: no view reads them, and at 100,000 bindings they
        # are ~160,000 objects per window.
        found = statements(bindings, pools, card or _NO_CARD, window, projects, activity,
                           keep_lines=False)
        return Computed(window, None if card is None else card.currency, found)

    def _masks_done(self) -> int | None:
        """How far the funnel's masks have rolled up (ms); None for a telemetry store
        without masks: every binding's activity is then unknown, never idle."""
        try:
            return self.queries.masks.refresh()
        except Unavailable:
            return None

    def _activity(self, session, bindings: list[BindingInterval],
                  window: Window) -> dict[int, Activity]:
        slots = read_slots(session, SYSTEM, window.start, window.end,
                           cache=self.queries.slot_cache)
        minutes = self.queries.binding_activity(slots, window.start, window.end)
        hours: dict[tuple[int, int, int], Fraction] = {}
        return {b.binding_id: exact_activity(b, window, *minutes[b.binding_id], hours)
                for b in bindings if b.binding_id in minutes}

    def view(self, principal: Principal, window: Window, *, project: str | None = None,
             by: str = "project", group: str | None = None) -> StatementsView:
        """The caller's statements: a member's own projects only, and roll-ups over those
        only; `project` keeps one (404 for one that does not exist or the caller may not
        see); `by` rolls up, `group` breaks each row down."""
        principal.require(Action.READ_BILLING_STATEMENTS)
        if by not in STATEMENT_BY:
            raise InvalidInput(f"cannot roll statements up by '{by}' (choose: "
                               f"{', '.join(STATEMENT_BY)})", code="invalid_roll_up",
                               details={"by": by})
        if group is not None and group not in STATEMENT_GROUPS:
            raise InvalidInput(f"cannot group statements by '{group}' (choose: "
                               f"{', '.join(STATEMENT_GROUPS)})", code="invalid_group",
                               details={"group": group})
        computed = self.computed(window)
        if project is not None and (project not in computed.statements
                                    or not principal.sees_project(project)):
            raise not_found("project", project)
        key = (principal.visible_projects, project, by, group)
        with self._lock:  # what the upkeep keeps up to date (not its own calls)
            self._asked[window] = self.clock.now()
            self._view_keys.setdefault(window, set()).add(key)
        return _kept_view(computed, key)


    def kept_view(self, principal: Principal, window: Window, *,
                  project: str | None = None, by: str = "project",
                  group: str | None = None) -> StatementsView | None:
        """`view`'s answer when its window's statements are kept (an open window's fresh,
        as `computed` would reuse them), else None — and the window is marked asked, so
        the upkeep loop computes it (`warm_asked_windows`) and a later call finds it. For
        a page that must not wait seconds for a month at 100,000 bindings: the Project
        page's cost line (docs/dashboard.md, "Billing")."""
        principal.require(Action.READ_BILLING_STATEMENTS)
        if project is not None and not principal.sees_project(project):
            raise not_found("project", project)
        now = self.clock.now()
        if window.start >= now:
            return None
        if window.end > now:
            with self._lock:
                kept = self._open.get(window)
            if kept is not None and (now - kept.window.end).total_seconds() > RECENT_S:
                kept = None
        else:
            done = self._masks_done()
            with self.store.read() as session:
                key = (window, sources.change_marker(session, window.end),
                       None if done is None else min(done, to_ms(window.end)))
            with self._lock:
                kept = self._kept.get(key)
        if kept is None:
            with self._lock:
                self._asked[window] = now
                self._view_keys.setdefault(window, set()).add(
                    (principal.visible_projects, project, by, group))
            return None
        return self.view(principal, window, project=project, by=by, group=group)


@contextmanager
def _no_collections() -> Iterator[None]:
    """No cyclic garbage collection while a statement is computed: it allocates ~10 objects
    per binding, none of them garbage, and each allocation burst set off collections that
    walked every live object of the server (a third of a month's computation at 100,000
    bindings, BENCHMARKS.md). Reference counting still frees what is dropped; collection
    resumes after (unless something else had turned it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _kept_view(computed: Computed, key: tuple) -> StatementsView:
    """The view of `key` (visible projects, project, by, group), built once per Computed."""
    view = computed._views.get(key)
    if view is None:
        view = computed._views[key] = _view(computed, *key)
    return view


def _view(computed: Computed, visible: frozenset[str] | None, project: str | None, by: str,
          group: str | None) -> StatementsView:
    seen = [name for name in sorted(computed.statements)
            if (visible is None or name in visible) and project in (None, name)]
    currency = computed.currency
    if by == "project":
        members = {name: [name] for name in seen}
    else:
        members = {}
        for name in seen:
            members.setdefault(getattr(computed.statements[name].project, by), []).append(name)
    rows = []
    for key in sorted(members, key=lambda k: k or ""):
        names = members[key]
        info = computed.statements[key].project if by == "project" else None
        rows.append(StatementRow(
            key=key, organisation=info and info.organisation,
            department=info and info.department, cost_centre=info and info.cost_centre,
            totals=totals_view(computed.summed(names), currency),
            groups=None if group is None else _groups(computed, names, group, currency)))
    return StatementsView(window_start=computed.window.start,
                          window_end=computed.window.end, currency=currency, by=by,
                          group=group, rows=rows,
                          total=totals_view(computed.summed(seen), currency))


def exact_activity(binding: BindingInterval, window: Window, active_minutes: int,
                   known_minutes: int,
                   hours: dict[tuple[int, int, int], Fraction] | None = None) -> Activity:
    """The masks' whole minutes as exact GPU-hours at the binding's exact weight.

    The masks count the minutes whose start lies in the binding (docs/billing.md, Known
    gaps); billing counts its time to the microsecond. At a binding's edges that can make
    the known minutes exceed the exact time held in the window by under a minute each; the
    excess comes off idle first, then active — never turning unknown into idle.

    `hours` (weight's numerator and denominator, minutes → GPU-hours) shares one Fraction
    per weight and count of minutes among a statement's bindings: few distinct ones, and
    making a Fraction costs more than finding it."""
    lo = max(binding.start, window.start)
    hi = window.end if binding.end is None else min(binding.end, window.end)
    held = hi - lo
    micros = max((held.days * 86400 + held.seconds) * 10**6 + held.microseconds, 0)
    weight = binding.weight
    if known_minutes * 60 * 10**6 <= micros:  # the usual case: no Fraction compared
        idle_minutes = known_minutes - active_minutes
        if hours is None:
            hours = {}
        found = []
        for count in (active_minutes, idle_minutes):
            key = (weight.numerator, weight.denominator, count)
            value = hours.get(key)
            if value is None:
                value = hours[key] = Fraction(key[0] * count, key[1] * 60)
            found.append(value)
        return Activity(*found)
    allocated = weight * Fraction(micros, MICROS_PER_HOUR)
    active = min(weight * Fraction(active_minutes, 60), allocated)
    idle = weight * Fraction(known_minutes - active_minutes, 60)
    return Activity(active, max(min(idle, allocated - active), Fraction(0)))


def _groups(computed: Computed, names: list[str], group: str,
            currency: str | None) -> list[StatementGroup]:
    found: dict[str | None, list[Totals]] = {}
    for name in names:
        for key, totals in computed.grouped(name, group).items():
            found.setdefault(key, []).append(totals)
    return [StatementGroup(group=key, totals=totals_view(ExactTotals.of(items), currency))
            for key, items in sorted(found.items(), key=lambda kv: kv[0] or "")]


def totals_view(totals: Totals | ExactTotals, currency: str | None) -> StatementTotals:
    """Hours as floats; money rounded once (`Totals.rounded`), or null without a card.
    Sums over projects come as `ExactTotals`: exact, and never reduced (seconds at
    100,000 bindings); the floats and rounded money are the reduced sum's, to the bit."""
    if isinstance(totals, Totals):
        totals = ExactTotals.of([totals])
    money = totals.rounded(currency) if currency is not None else \
        dict.fromkeys(("cost", "idle_cost", "idle_adjustment", "total_cost"))
    efficiency = totals.efficiency
    return StatementTotals(
        **{name: totals.float(name) for name in (
            "allocated_gpu_hours", "reserved_gpu_hours", "charged_gpu_hours",
            "unpriced_gpu_hours", "active_gpu_hours", "idle_gpu_hours",
            "unknown_gpu_hours")},
        efficiency_percent=None if efficiency is None else float(efficiency * 100),
        **money)
