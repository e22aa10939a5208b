"""Which nodes a decision looks at, and in what order (docs/placement.md, "Indexes and
cost").

A walk reads the fleet's buckets for the demand's kind level by level — free whole GPUs,
the largest free shared fraction, a MIG profile's best source, free capacity for
host-only tasks — and offers one node of each group of interchangeable nodes (same
signature), or every node when the caller must tell them apart. It never copies a bucket:
`decide` changes nothing while it walks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import mig_plans
from .fleet import SHARED_LEVEL_MILLI, FleetState, Pool
from .model import MILLI, Demand, NodeState, UnitKind

_END = object()  # a walk's end (None stands for a node it passed over)


@dataclass
class Walk:
    """What a candidate walk needs from the decision."""

    fleet: FleetState
    pools: list[Pool]  # the pools the demand may use
    demand: Demand
    profile_ids: dict[str, int]  # MIG: model -> profile id of the demanded profile
    whole_from_shared: bool
    units: int  # units wanted on one node
    per_signature: bool  # offer every node of a signature group, not one
    host: tuple[int, int]  # free CPU milli / memory MiB a node needs to be offered
    short_of_host: list[str]  # filled in: the nodes passed over for host resources


# Candidate nodes a decision scores at most (`Placer(max_candidates=)`). 256: on held-out
# openb draws (bench_placement_heldout.py) 128 left one fraction-heavy draw 0.54 points
# below FGD (gpushare80 draw 2: 88.65 %; 256: 89.71 %), the published family the same or
# better (worst +0.05, mean +0.61); BENCHMARKS.md, "…256 candidates".
DEFAULT_MAX_CANDIDATES = 256


def candidates(walk: Walk, policy: str, max_candidates: int) -> Iterator[NodeState]:
    """Distinct candidate nodes in the policy's order.

    Tightest fits first (`binpack`, `default`), emptiest first (`spread`). The caller
    stops after `max_candidates` nodes that fit; the default policy looks at the tightest
    fits first and then at the emptiest nodes, so both stay in view when the cap bites:
    the first 7/8 of `max_candidates` walked from the tight end, then one from each end
    in turn.

    Nodes with less free CPU / memory than `walk.host` (read from their signature) are
    not offered but listed in `walk.short_of_host`: on a busy fleet most nodes of a
    bucket can be short of host resources, and offering each costs more than passing it
    over. They still take their turn in the default policy's alternation (its walks
    yield None for them), so which nodes it offers does not change.
    """
    seen: set[str] = set()
    if policy != "default":
        yield from _walk(walk, policy != "spread", seen, False)
        return
    head = _walk(walk, True, seen, True)
    tail = _walk(walk, False, seen, True)
    for _ in range(max(1, max_candidates * 7 // 8)):
        node = next(head, _END)
        if node is _END:
            break
        if node is not None:
            yield node
    pending = [head, tail]
    while pending:
        for one in list(pending):
            node = next(one, _END)
            if node is _END:
                pending.remove(one)
            elif node is not None:
                yield node


def _walk(walk: Walk, ascending: bool, seen: set[str],
          hold_places: bool) -> Iterator[NodeState | None]:
    demand, pools = walk.demand, walk.pools
    if demand.host_only:
        attribute, levels = "host", range(0, max(8, max_gpus(pools)) * 8 + 1)
    elif demand.kind is UnitKind.WHOLE:
        attribute = "whole_any" if walk.whole_from_shared else "whole_exclusive"
        levels = range(max(1, walk.units), max_gpus(pools) + 1)
    elif demand.kind is UnitKind.SHARED:
        attribute, levels = "shared", range(demand.milli // SHARED_LEVEL_MILLI,
                                            MILLI // SHARED_LEVEL_MILLI + 1)
    else:  # existing unbound instances first, then new instances, then re-partitions
        attribute, levels = "mig", range(mig_plans.EXISTING, mig_plans.REPARTITION + 1)
    if not ascending:
        levels = reversed(levels)
    # (pool's buckets by level, MIG profile id: MIG levels are (profile id, tier)),
    # for the pools with any such bucket
    tables = [(getattr(pool, attribute),
               walk.profile_ids[pool.model] if attribute == "mig" else None)
              for pool in pools if getattr(pool, attribute)]
    cpu, memory = walk.host
    short = walk.short_of_host
    node = walk.fleet.node
    per_signature = walk.per_signature
    for level in levels:
        for by_level, profile_id in tables:
            bucket = by_level.get(level if profile_id is None else (profile_id, level))
            if not bucket:
                continue
            for signature, names in bucket.items():
                # signature: (pictures, cpu free, memory free, environment, open)
                free_cpu, free_memory = signature[1], signature[2]
                offered = names if per_signature else (next(iter(names)),)
                if ((free_cpu is not None and free_cpu < cpu)
                        or (free_memory is not None and free_memory < memory)):
                    short.extend(offered)
                    if hold_places:
                        for name in offered:
                            if name not in seen:
                                seen.add(name)
                                yield None
                    continue
                for name in offered:
                    if name not in seen:
                        seen.add(name)
                        yield node(name)


def max_gpus(pools: list[Pool]) -> int:
    return max((pool.max_gpus for pool in pools), default=0)
