"""The store's minute masks (tsdb/duckdb_masks.py) against the docs/design.md, "Funnel and activity"
definitions. (tests/services/telemetry/test_masks_vm.py runs the same tests on the
Prometheus-compatible store.)

The funnel and the idle list are computed from the masks; the domain's per-minute helpers
(`unit_activity`, `Funnel.add_minute`, `classify_minute`, `idle_verdict_from_minutes`) are
the specification. Each example writes random minute histories of a few units into a real
DuckDB store — whole GPUs and MIG instances of an Ampere and a Hopper model, each signal
present, missing or switching mid-hour, values around the thresholds — rolls them up in
steps, and asks the masks about random bindings that start and end mid-minute. The answer
must equal the definitions applied to the same minute values.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpufleet.domain.telemetry.funnel import (
    GR_ENGINE_ACTIVE,
    MEMORY_USED,
    PROCESS_MEMORY,
    SM_ACTIVE,
    UTILIZATION,
    Funnel,
    IdleState,
    Thresholds,
    architecture_of_model,
    classify_minute,
    idle_verdict,
    idle_verdict_from_minutes,
    unit_activity,
)
from gpufleet.services.telemetry import live
from gpufleet.tsdb import Sample, TelemetryStore, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.masks import SlotSpan, SpanColumns
from gpufleet.tsdb.protocol import MINUTE_MS, to_ms

GIB = 1024**3
HOUR0 = datetime(2026, 11, 2, tzinfo=UTC)
T = Thresholds(idle_window_minutes=45)
# No shrinking: a failing example already prints short (runs of values), and shrinking one
# history of five units takes minutes.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


@dataclass(frozen=True)
class Unit:
    gpu: str
    mig: str | None
    model: str
    environment: str

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.gpu, self.mig)


UNITS = (Unit("GPU-A", None, "A100-80GB", "e1"),  # whole Ampere GPU
         Unit("GPU-B", "MIG-B1", "A100-80GB", "e1"),  # Ampere MIG instances
         Unit("GPU-B", "MIG-B2", "A100-80GB", "e1"),
         Unit("GPU-C", None, "H100-80GB", "e2"),  # whole Hopper GPU
         Unit("GPU-D", "MIG-D1", "H100-80GB", "e2"))  # Hopper MIG instance

PERCENTS = [0.0, 4.99, 5.0, 5.01, 30.0, 49.99, 50.0, 50.01, 100.0]
BYTES = [0.0, 0.5 * GIB, float(GIB), 2.0 * GIB]
METRICS = {GR_ENGINE_ACTIVE: PERCENTS, UTILIZATION: PERCENTS, SM_ACTIVE: PERCENTS,
           MEMORY_USED: BYTES, PROCESS_MEMORY: [float(GIB)]}


def runs(values: list[float]) -> st.SearchStrategy[list[tuple[int, float | None]]]:
    """A signal as runs of minutes: a value held, or missing (None)."""
    return st.lists(st.tuples(st.integers(1, 50), st.none() | st.sampled_from(values)),
                    max_size=5)


@dataclass(repr=False)
class History:
    start_minute: int  # the first minute, counted from HOUR0 (histories start mid-hour)
    length: int  # minutes
    # unit index → metric → value per minute (None: no sample that minute)
    values: dict[int, dict[str, list[float | None]]] = field(default_factory=dict)

    def __repr__(self) -> str:  # runs of equal values, so a failing example reads short
        def runs_of(minutes: list[float | None]) -> list[tuple[int, float | None]]:
            out: list[tuple[int, float | None]] = []
            for v in minutes:
                out[-1:] = [(out[-1][0] + 1, v)] if out and out[-1][1] == v else \
                    [*out[-1:], (1, v)]
            return out
        values = {UNITS[u].key: {m: runs_of(v) for m, v in ms.items()
                                 if any(x is not None for x in v)}
                  for u, ms in self.values.items()}
        return f"History({self.start_minute}, {self.length}, {values})"

    def _repr_pretty_(self, p, cycle) -> None:  # what Hypothesis prints
        p.text(repr(self))

    def empty(self) -> bool:
        return all(v is None for ms in self.values.values() for vs in ms.values() for v in vs)

    def at(self, unit: int, metric: str, minute: int) -> float | None:
        i = minute - self.start_minute
        return self.values[unit][metric][i] if 0 <= i < self.length else None


@st.composite
def histories(draw) -> History:
    history = History(draw(st.integers(0, 59)), draw(st.integers(20, 150)))
    for u in range(len(UNITS)):
        history.values[u] = {}
        for metric, values in METRICS.items():
            minutes: list[float | None] = []
            for count, value in draw(runs(values)):
                minutes += [value] * count
            history.values[u][metric] = (minutes + [None] * history.length)[:history.length]
    return history


@st.composite
def spans(draw, history: History) -> list[SlotSpan]:
    """Bindings of some units, starting and ending at any second, several per unit."""
    lo_s = (history.start_minute - 10) * 60
    hi_s = (history.start_minute + history.length + 10) * 60
    chosen = []
    for unit in UNITS:
        for _ in range(draw(st.integers(0, 3))):
            a, b = sorted(draw(st.lists(st.integers(lo_s, hi_s), min_size=2, max_size=2)))
            chosen.append(SlotSpan(unit.key, to_ms(HOUR0) + a * 1000, to_ms(HOUR0) + b * 1000,
                                   draw(st.integers(0, 2)),
                                   draw(st.sampled_from([1.0, 0.5, 1 / 7, 3 / 7]))))
    return chosen


def write(store: TelemetryStore, history: History) -> None:
    samples = []
    for u, unit in enumerate(UNITS):
        for metric, minutes in history.values[u].items():
            labels = {"pid": "7"} if metric == PROCESS_MEMORY else None
            s = series(metric, unit.gpu, unit.mig, labels=labels, node=f"n-{unit.gpu}",
                       environment=unit.environment, model=unit.model)
            samples += [Sample(s, HOUR0 + timedelta(minutes=history.start_minute + i,
                                                    seconds=30), v)
                        for i, v in enumerate(minutes) if v is not None]
    store.write(samples)


# --- the definitions, applied to the same minute values -------------------------------------

def activity(history: History, u: int, minute: int) -> float | None:
    """The unit's activity in `minute` (docs/design.md, "Funnel and activity"): the domain's
    `unit_activity` on the values that minute has."""
    unit = UNITS[u]
    latest = {m: v for m in (GR_ENGINE_ACTIVE, UTILIZATION, MEMORY_USED)
              if (v := history.at(u, m, minute)) is not None}
    value, _ = unit_activity(latest,
                             process_running=history.at(u, PROCESS_MEMORY, minute) is not None,
                             is_mig=unit.mig is not None,
                             architecture=architecture_of_model(unit.model))
    return value


def minutes_of(lo_ms: int, hi_ms: int) -> range:
    """The minutes (from HOUR0) whose start lies in [lo, hi)."""
    base = to_ms(HOUR0)
    return range(-(-(lo_ms - base) // MINUTE_MS), -(-(hi_ms - base) // MINUTE_MS))


def unit_index(span: SlotSpan) -> int:
    return next(i for i, unit in enumerate(UNITS) if unit.key == span.unit)


def expected_funnels(history: History, chosen: list[SlotSpan], lo: int, hi: int,
                     done: int) -> dict[int, Funnel]:
    funnels: dict[int, Funnel] = defaultdict(Funnel)
    for span in chosen:
        u = unit_index(span)
        for m in minutes_of(max(span.lo_ms, lo), min(span.hi_ms, hi, done)):
            funnels[span.group].add_minute(span.weight, activity(history, u, m),
                                           history.at(u, SM_ACTIVE, m), T)
    return funnels


def spread_sm(history: History, chosen: list[SlotSpan], lo: int, hi: int,
              done: int) -> dict[int, float]:
    """The masks' stated approximation of Σ weight × sm_active: each hour's sum spread evenly
    over the hour's known minutes (duckdb_masks.py)."""
    last = (done - to_ms(HOUR0)) // MINUTE_MS  # minutes from here on are not rolled up

    def known(u: int, hour: int) -> list[int]:
        return [m for m in range(hour * 60, min(hour * 60 + 60, last))
                if history.at(u, SM_ACTIVE, m) is not None]

    sums: dict[int, float] = defaultdict(float)
    for span in chosen:
        u = unit_index(span)
        for m in minutes_of(max(span.lo_ms, lo), min(span.hi_ms, hi, done)):
            hour = known(u, m // 60)
            if m in hour:
                total = sum(min(max(history.at(u, SM_ACTIVE, k), 0), 100) for k in hour)
                sums[span.group] += span.weight * total / len(hour)
    return sums


def reporting(history: History, by_model: bool, lo: int, hi: int, done: int) -> dict:
    """GPU-minutes in which a GPU sent any signal the funnel reads."""
    counts: dict[tuple, int] = defaultdict(int)
    for gpu in sorted({unit.gpu for unit in UNITS}):
        units = [i for i, unit in enumerate(UNITS) if unit.gpu == gpu]
        key = (UNITS[units[0]].model,) if by_model else ()
        for m in minutes_of(lo, min(hi, done)):
            if any(history.at(u, metric, m) is not None
                   for u in units for metric in (GR_ENGINE_ACTIVE, UTILIZATION, SM_ACTIVE,
                                                 MEMORY_USED)
                   if _is_signal(UNITS[u], metric)):
                counts[key] += 1
    return {k: v for k, v in counts.items() if v}


def _is_signal(unit: Unit, metric: str) -> bool:
    if metric == MEMORY_USED:  # an instance's own memory says it reports (Ampere MIG only)
        return unit.mig is not None and unit.model.startswith("A100")
    if metric == UTILIZATION:
        return unit.mig is None
    return True


# --- the property ---------------------------------------------------------------------------

@pytest.fixture
def fresh_store():
    stores = []

    def make() -> DuckDBTelemetryStore:
        store = DuckDBTelemetryStore(":memory:", threads=1, apply_interval_s=None)
        stores.append(store)
        return store
    yield make
    for store in stores:
        store.close()


@settings(max_examples=40, derandomize=True, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_the_masks_count_what_the_definitions_count(fresh_store, data):
    history = data.draw(histories(), label="history")
    store = fresh_store()
    write(store, history)
    masks = store.minute_masks(T)
    masks.cache_hours = data.draw(st.sampled_from([48, 1]), label="cache_hours")
    first, end = history.start_minute, history.start_minute + history.length
    cuts = sorted(data.draw(st.lists(st.integers(first + 1, end + 1), min_size=1, max_size=3),
                            label="rollup cuts"))
    for cut in cuts:  # rolled up in steps: the masks fold the open hour incrementally
        store.rollup(HOUR0 + timedelta(minutes=cut, seconds=5))
        done = masks.refresh()
    # (The embedded store's bound stays 0 while it has nothing to roll up.)
    assert done == to_ms(HOUR0) + cuts[-1] * MINUTE_MS or (history.empty() and done == 0)

    chosen = data.draw(spans(history), label="bindings")
    edge = st.integers((first - 5) * 60_000, (end + 5) * 60_000).map(lambda x: to_ms(HOUR0) + x)
    lo, hi = sorted(data.draw(st.lists(edge, min_size=2, max_size=2), label="window"))

    # As columns, as the services pass them (the idle test below passes a list).
    tallies = masks.tallies(SpanColumns.of(chosen), lo, hi, done)
    expected = expected_funnels(history, chosen, lo, hi, done)
    spread = spread_sm(history, chosen, lo, hi, done)
    for group in {s.group for s in chosen} | set(tallies):
        got, want = tallies.get(group), expected.get(group, Funnel())
        known = want.allocated_gpu_hours - want.unknown_gpu_hours
        assert (got.active if got else 0.0) == pytest.approx(want.active_gpu_hours * 60)
        assert (got.effective if got else 0.0) == pytest.approx(want.effective_gpu_hours * 60)
        assert (got.known if got else 0.0) == pytest.approx(known * 60)
        assert (got.sm_percent if got else 0.0) == pytest.approx(spread.get(group, 0.0))

    lean = masks.active_known(SpanColumns.of(chosen), lo, hi, done)
    assert lean.keys() == set(tallies)
    for group, (active, known) in lean.items():
        assert (active, known) == pytest.approx((tallies[group].active, tallies[group].known))

    for by_model in (False, True):
        got = masks.reporting_minutes(("model",) if by_model else (), lo, hi, done)
        assert {k: v for k, v in got.items() if v} == reporting(history, by_model, lo, hi, done)


@settings(max_examples=40, derandomize=True, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_the_idle_list_judges_what_the_definitions_judge(fresh_store, data):
    """As `TelemetryQueries.idle` asks: each binding open at the end, over the idle window
    ending at the last rolled-up minute; its verdict, and its last active minute."""
    history = data.draw(histories(), label="history")
    store = fresh_store()
    write(store, history)
    masks = store.minute_masks(T)
    end = history.start_minute + history.length
    store.rollup(HOUR0 + timedelta(minutes=end))
    done = masks.refresh()
    now = HOUR0 + timedelta(minutes=end, seconds=10)
    lo = done - T.idle_window_minutes * MINUTE_MS
    look_lo = to_ms(HOUR0)
    chosen = [SlotSpan(s.unit, s.lo_ms, max(s.hi_ms, done), n, s.weight)  # open at the end
              for n, s in enumerate(data.draw(spans(history), label="bindings"))]
    window = [SlotSpan(s.unit, max(s.lo_ms, lo), done, s.group, s.weight) for s in chosen]
    counts = masks.tallies(window, lo, done, done)
    lean = masks.active_known(window, lo, done, done)  # the idle list's window, on its own
    assert lean.keys() == set(counts)
    for n, (active, known) in lean.items():
        assert (active, known) == pytest.approx((counts[n].active, counts[n].known))
    looked = [SlotSpan(s.unit, max(s.lo_ms, look_lo), done, s.group, s.weight)
              for s in chosen]
    last = masks.tallies(looked, look_lo, done, done, last_active=True)
    last_only = masks.last_active_minutes(looked, look_lo, done, done)
    memory = live.latest_memory(store, [u.key for u in UNITS], now)

    for span in chosen:
        u, n = unit_index(span), span.group
        count = counts.get(n)
        held = memory.get(span.unit)
        bound = minutes_of(max(span.lo_ms, lo), done)
        values = [activity(history, u, m) if m in bound else None
                  for m in minutes_of(lo, done)]
        want = idle_verdict_from_minutes(
            values, bound_minutes=len(bound),
            memory_used_bytes=held, t=T)
        active = round(count.active / span.weight) if count else 0
        known = count.known / span.weight if count else 0.0
        got = idle_verdict(window_minutes=T.idle_window_minutes,
                           bound_minutes=T.idle_window_minutes if span.lo_ms <= lo else 0,
                           known_minutes=round(known), active_minutes=active,
                           memory_used_bytes=held, t=T)
        assert got is want, (span, values)
        if got in (IdleState.IDLE, IdleState.IDLE_HELD):
            assert live.idle_state(T, known_minutes=known, memory=held) == got.value

        active_minutes = [m for m in minutes_of(max(span.lo_ms, look_lo), done)
                          if classify_minute(activity(history, u, m), None, T).active]
        got_last = last[n].last_active_ms if n in last else None
        want_last = to_ms(HOUR0) + active_minutes[-1] * MINUTE_MS if active_minutes else None
        assert got_last == want_last
        assert last_only.get(n) == want_last  # the idle list's look-back, on its own


def test_latest_memory_reads_the_unit_own_series(fresh_store):
    """The idle-held memory comes from the unit's own `gpu.memory_used_bytes` (a sanity check
    of the helper the property above leans on)."""
    store = fresh_store()
    history = History(0, 3, {u: {m: [None] * 3 for m in METRICS} for u in range(len(UNITS))})
    history.values[1][MEMORY_USED] = [GIB, None, 2.0 * GIB]
    write(store, history)
    got = live.latest_memory(store, [UNITS[1].key, UNITS[2].key],
                                       HOUR0 + timedelta(minutes=3))
    assert got == {UNITS[1].key: 2.0 * GIB}


def test_the_activity_source_is_chosen_per_minute(fresh_store):
    """Within one hour a unit's best signal may come and go: each minute is judged on the
    best signal it has (an Ampere instance whose gr_engine_active stops half-way through
    the hour still reports, so process presence judges the rest; a whole GPU falls back to
    utilization). The masks once chose one source for the whole hour."""
    store = fresh_store()
    history = History(0, 60, {u: {m: [None] * 60 for m in METRICS} for u in range(len(UNITS))})
    for u in (0, 1):  # the whole Ampere GPU and an Ampere instance
        history.values[u][GR_ENGINE_ACTIVE] = [1.0] * 30 + [None] * 30
    history.values[0][UTILIZATION] = [None] * 30 + [80.0] * 30
    history.values[1][MEMORY_USED] = [None] * 30 + [float(GIB)] * 30
    history.values[1][PROCESS_MEMORY] = [None] * 30 + [float(GIB)] * 20 + [None] * 10
    write(store, history)
    masks = store.minute_masks(T)
    store.rollup(HOUR0 + timedelta(hours=1))
    done = masks.refresh()
    lo = to_ms(HOUR0)
    tallies = masks.tallies([SlotSpan(UNITS[0].key, lo, done, 0, 1.0),
                             SlotSpan(UNITS[1].key, lo, done, 1, 1.0)], lo, done, done,
                            last_active=True)
    assert (tallies[0].known, tallies[0].active) == (60, 30)
    assert tallies[0].last_active_ms == lo + 59 * MINUTE_MS
    assert (tallies[1].known, tallies[1].active) == (60, 20)
    assert tallies[1].last_active_ms == lo + 49 * MINUTE_MS

