"""The property of issue 14 on the store's own data: through `record_alert_evaluation`,
on SQLite and PostgreSQL, a rule fires iff its condition held for its duration."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.domain.operations.observations import Observation
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.alert_queries import AlertFilter
from tests.services.operations.alert_world import Rule, evaluate

_serial = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.tuples(st.integers(0, 400), st.booleans(), st.booleans()),
                       min_size=1, max_size=12),
       for_s=st.sampled_from([0, 60, 300]))
def test_the_store_fires_an_alert_iff_its_condition_held_for_its_duration(gf, rounds, for_s):
    rule = Rule(name=f"r{next(_serial)}", for_s=for_s)  # each example its own alerts
    run_start, fires = None, False
    for step_s, evaluated, seen in rounds:
        now = gf.clock.advance(step_s)
        if not evaluated:  # its data unavailable: whatever held stays as it was
            evaluate(gf, rules=[rule], evaluated=[])
        elif seen:
            run_start = run_start or now
            evaluate(gf, Observation(rule=rule.name, labels={"node": "node-1"}, at=now),
                     rules=[rule])
        else:
            run_start = None
            evaluate(gf, rules=[rule])
        listed = gf.list_alerts(SYSTEM, AlertFilter(rules=[rule.name]), None, 10).items
        assert len(listed) <= 1  # one alert per fingerprint, however often seen
        if evaluated:
            fires = run_start is not None and (now - run_start).total_seconds() >= for_s
        assert (bool(listed) and listed[0].state is AlertState.FIRING) == fires
