"""Where a MIG instance of a profile can come from on one GPU, exactly as the hardware allows.

Three sources, in order of preference (docs/design.md, "Placement"):

1. an existing, unbound instance of the profile (nothing changes on the GPU);
2. a new instance at an allowed placement on memory slices no instance covers — the
   complete new layout is checked with `layout_problems` (caps, overlaps, `+me.all`);
3. a re-partition of a GPU with no bound instance at all: its unbound instances are
   dropped and the new instance is the whole layout.

A GPU whose layout is *fixed* — its node's backend cannot create or destroy instances
(`nvml`, `dcgm-exporter`) — offers only the first: a plan there could never be applied.

Results are cached by (model geometry, layout): layouts repeat across a fleet, and the
same few dozen layouts cover most GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpufleet.domain.gpu_models import model as gpu_model
from gpufleet.domain.mig import MigGeometry, MigInstanceSpec, layout_problems

# (profile id, start, bound) per instance, sorted: a hashable picture of a GPU's layout.
LayoutKey = tuple[tuple[int, int, bool], ...]

EXISTING, NEW_INSTANCE, REPARTITION = 0, 1, 2


@dataclass(frozen=True)
class MigOption:
    """One way to get an instance of a profile on a GPU."""

    tier: int  # EXISTING, NEW_INSTANCE or REPARTITION
    start: int
    layout: LayoutKey  # the GPU's complete layout afterwards, the chosen instance bound
    flexibility: int  # what the rest of the GPU can still host afterwards; higher is better


@lru_cache(maxsize=1024)
def geometry_of(model_key: str) -> MigGeometry | None:
    """The model's MIG geometry; None for a model gpufleet does not know or without MIG.

    Caches below are keyed by the model key (a short string), not the geometry, whose
    hash walks every profile on each call.
    """
    found = gpu_model(model_key)
    return found.mig if found is not None else None


@lru_cache(maxsize=1024)
def unit_milli(model_key: str, profile_id: int) -> int:
    """An instance's weight (docs/design.md, "Funnel and activity") in milli-GPU."""
    geometry = geometry_of(model_key)
    return round(geometry.weight(geometry.profile(profile_id)) * 1000)


def _specs(layout: LayoutKey) -> list[MigInstanceSpec]:
    return [MigInstanceSpec(pid, start) for pid, start, _ in layout]


def _valid(geometry: MigGeometry, layout: LayoutKey) -> bool:
    return not layout_problems(geometry, _specs(layout))


def _with(layout: LayoutKey, entry: tuple[int, int, bool]) -> LayoutKey:
    return tuple(sorted((*layout, entry)))


@lru_cache(maxsize=65536)
def _new_starts(model_key: str, layout: LayoutKey, profile_id: int) -> tuple[int, ...]:
    geometry = geometry_of(model_key)
    profile = geometry.profile(profile_id)
    occupied = {s for pid, start, _ in layout
                for s in geometry.profile(pid).placement_at(start).slices}
    starts = []
    for placement in profile.placements:
        if occupied.intersection(placement.slices):
            continue
        if _valid(geometry, _with(layout, (profile_id, placement.start, True))):
            starts.append(placement.start)
    return tuple(starts)


@lru_cache(maxsize=65536)
def flexibility(model_key: str, layout: LayoutKey) -> int:
    """How much the GPU can still take: every (profile, start) still creatable, weighted
    by its memory slices.

    A placement that keeps room for big profiles (a 1g instance at the end rather than at
    slice 0, which would block 4g and 7g) scores higher; used to choose among placements.
    """
    total = 0
    for profile in geometry_of(model_key).profiles:
        starts = len(_new_starts(model_key, layout, profile.profile_id))
        total += starts * profile.memory_slices
    return total


@lru_cache(maxsize=65536)
def options(model_key: str, layout: LayoutKey, profile_id: int,
            fixed: bool = False) -> tuple[MigOption, ...]:
    """Every distinct way to get one instance of `profile_id` on a GPU with `layout`;
    on a `fixed` layout, only an existing unbound instance."""
    found: list[MigOption] = []
    unbound = [(pid, start) for pid, start, bound in layout if pid == profile_id and not bound]
    for pid, start in unbound[:1]:  # unbound instances of one profile are interchangeable
        after = tuple(sorted((p, s, b or (p == pid and s == start)) for p, s, b in layout))
        found.append(MigOption(EXISTING, start, after, flexibility(model_key, after)))
    if fixed:
        return tuple(found)
    for start in _new_starts(model_key, layout, profile_id):
        after = _with(layout, (profile_id, start, True))
        found.append(MigOption(NEW_INSTANCE, start, after, flexibility(model_key, after)))
    if layout and not any(bound for *_, bound in layout):
        for start in _new_starts(model_key, (), profile_id):
            after = ((profile_id, start, True),)
            found.append(MigOption(REPARTITION, start, after, flexibility(model_key, after)))
    return tuple(found)


@lru_cache(maxsize=65536)
def best_option(model_key: str, layout: LayoutKey, profile_id: int,
                fixed: bool = False) -> MigOption | None:
    """The preferred option: lowest tier, then most flexibility left, then lowest start."""
    found = options(model_key, layout, profile_id, fixed)
    if not found:
        return None
    return min(found, key=lambda o: (o.tier, -o.flexibility, o.start))


@lru_cache(maxsize=65536)
def hostable(model_key: str, layout: LayoutKey, fixed: bool = False) -> frozenset[int]:
    """Profile ids of which one more instance can be had on a GPU with `layout`."""
    return frozenset(p.profile_id for p in geometry_of(model_key).profiles
                     if options(model_key, layout, p.profile_id, fixed))


@lru_cache(maxsize=65536)
def best_tiers(model_key: str, layout: LayoutKey,
               fixed: bool = False) -> tuple[tuple[int, int], ...]:
    """(profile id, best tier) for every profile one more instance of can be had."""
    found = []
    for profile in geometry_of(model_key).profiles:
        option = best_option(model_key, layout, profile.profile_id, fixed)
        if option is not None:
            found.append((profile.profile_id, option.tier))
    return tuple(found)


@lru_cache(maxsize=65536)
def bound_milli(model_key: str, layout: LayoutKey) -> int:
    """Milli-GPU held by bound instances (what the GPU has allocated)."""
    return min(1000, sum(unit_milli(model_key, pid) for pid, _, bound in layout if bound))

