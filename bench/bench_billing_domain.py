"""The billing domain alone at N bindings: `statements()` for a month, then the sums a view
takes over every project (docs/billing.md, "Cost").

    .venv/bin/python bench/bench_billing_domain.py --bindings 100000

Shaped like bench_billing_statements.py without the store: whole H100s in 4 environments,
bindings started up to 36 h before NOW (15 % ended), 200 projects, rates for H100-80GB in
each environment and for any with a price change 12 h before NOW (a cut inside the month),
and activity for every binding held in the last two hours (a random share active). Prints
CPU time per step and a digest of every project's groups, so two versions of the domain
can be compared for equal results as well as time.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from gpufleet.domain.billing.charges import BindingInterval, Window
from gpufleet.domain.billing.rates import Rate, RateCard
from gpufleet.domain.billing.statements import ProjectInfo, statements, sum_totals
from gpufleet.services.billing.statements import exact_activity

try:  # older versions (before the cold-statement work) had neither: compare with them
    from gpufleet.domain.billing.statements import ExactTotals
except ImportError:
    ExactTotals = None

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
ENVIRONMENTS = ("env-a", "env-b", "env-c", "env-d")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    since = NOW - timedelta(days=40)
    cut = NOW - timedelta(hours=12)
    rates = []
    for environment in (None, *ENVIRONMENTS):
        rates.append(Rate("H100-80GB", Decimal("2.45" if environment is None else "2.10"),
                          since, cut, environment))
        rates.append(Rate("H100-80GB", Decimal("2.50" if environment is None else "2.20"),
                          cut, None, environment))
    card = RateCard("EUR", tuple(rates))
    projects = {f"project-{p:03d}": ProjectInfo(f"project-{p:03d}", "research", f"d{p % 7}",
                                                f"c{p % 13}") for p in range(200)}
    window = Window(datetime(2026, 11, 1, tzinfo=UTC), NOW)
    weight = Fraction(1)
    bindings = []
    for i in range(args.bindings):
        start = NOW - timedelta(hours=rng.uniform(2, 36))
        end = None if rng.random() < 0.85 else start + timedelta(hours=rng.uniform(1, 10))
        bindings.append(BindingInterval(i + 1, f"project-{rng.randrange(200):03d}",
                                        "H100-80GB", ENVIRONMENTS[i % 4], weight, start,
                                        None if end is not None and end > NOW else end))
    known_since = NOW - timedelta(hours=2)
    activity = {}
    for b in bindings:
        if b.end is not None and b.end <= known_since:
            continue
        known = 120 if b.end is None else int((b.end - known_since).total_seconds() // 60)
        activity[b.binding_id] = exact_activity(b, window, rng.randrange(known + 1), known)
    print(f"{len(bindings):,} bindings, {len(activity):,} with activity, {len(rates)} rates")
    gc.disable()  # as the service computes (services/billing/statements._no_collections)
    cpu = time.process_time()
    try:
        found = statements(bindings, [], card, window, projects, activity, keep_lines=False)
    except TypeError:  # an older version: no keep_lines
        found = statements(bindings, [], card, window, projects, activity)
    print(f"statements()                   {(time.process_time() - cpu) * 1000:8.1f} ms CPU")
    cpu = time.process_time()
    totals = [statement.totals for statement in found.values()]
    print(f"each project's totals          {(time.process_time() - cpu) * 1000:8.1f} ms CPU")
    cpu = time.process_time()
    money = ExactTotals.of(totals).rounded("EUR") if ExactTotals is not None else \
        sum_totals(totals).rounded("EUR")
    print(f"sum over projects, rounded     {(time.process_time() - cpu) * 1000:8.1f} ms CPU"
          f"   cost {money['cost']} idle cost {money['idle_cost']}")
    gc.enable()
    digest = hashlib.sha256(repr(sorted(
        (name, sorted(st.groups.items(), key=repr)) for name, st in found.items())).encode())
    print(f"digest of every group's totals: {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
