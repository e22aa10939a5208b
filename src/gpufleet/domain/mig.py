"""MIG geometry: profiles, allowed placements and the validity of a layout.

A MIG instance is keyed by (parent GPU UUID, profile id, placement start) — docs/design.md,
"Concepts". Profile *names* drift between drivers (`3g.39gb` vs `3g.40gb`), so they are display
only; everything here is keyed on the profile id and the slice counts. The facts come from the
reference shipped as package data (`data/mig_geometry.json`), never read from outside.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """A GPU instance occupies memory slices [start, start + size)."""

    start: int
    size: int

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class MigProfile:
    profile_id: int
    name: str
    compute_slices: int
    memory_slices: int
    max_instances: int
    placements: tuple[Placement, ...]
    memory_gib: float | None
    nvml_profile_enum: str | None = None  # e.g. `1_SLICE_ALL_ME`; says which media it holds

    @property
    def takes_all_media(self) -> bool:
        """`+me.all` (RTX PRO 6000): beside it only `-me` profiles may exist (mig.md §2.4)."""
        return (self.nvml_profile_enum or "").endswith("_ALL_ME")

    @property
    def has_no_media(self) -> bool:
        return (self.nvml_profile_enum or "").endswith("_NO_ME")

    def placement_at(self, start: int) -> Placement | None:
        return next((p for p in self.placements if p.start == start), None)


@dataclass(frozen=True)
class MigGeometry:
    memory_slices_total: int
    compute_slices_total: int
    max_gpu_instances: int
    profiles: tuple[MigProfile, ...]
    placements_inferred: bool

    def profile(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.profile_id == profile_id), None)

    def profile_named(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def weight(self, profile: MigProfile) -> float:
        """Share of the GPU an instance holds (docs/design.md, "Funnel and activity"): max of
        compute and memory shares."""
        return max(profile.compute_slices / self.compute_slices_total,
                   profile.memory_slices / self.memory_slices_total)


@dataclass(frozen=True)
class MigInstanceSpec:
    """One GPU instance of a layout: which profile, starting at which memory slice."""

    profile_id: int
    start: int


def mig_unit_name(gpu_uuid: str, profile_id: int, placement_start: int) -> str:
    """The unit name of a MIG instance in desired state (bindings) and telemetry: built from its key
    (docs/design.md, "Concepts": parent GPU, profile id, placement start), never its MIG UUID."""
    return f"{gpu_uuid}/mig/{profile_id}@{placement_start}"


def layout_problems(geometry: MigGeometry, instances: Iterable[MigInstanceSpec]) -> list[str]:
    """Every reason a set of GPU instances could not coexist on one GPU; empty when valid.

    The rules (mig.md §2): each placement is one the profile allows, memory ranges are
    pairwise disjoint, no profile exceeds its instance cap, and beside a `+me.all` instance
    (which takes every media engine) only `-me` instances exist.
    """
    problems: list[str] = []
    occupied: dict[int, MigInstanceSpec] = {}
    per_profile: Counter[int] = Counter()
    instances = list(instances)
    for spec in instances:
        profile = geometry.profile(spec.profile_id)
        if profile is None:
            problems.append(f"profile id {spec.profile_id} does not exist on this GPU model")
            continue
        placement = profile.placement_at(spec.start)
        if placement is None:
            allowed = ",".join(str(p.start) for p in profile.placements)
            problems.append(f"{profile.name} (id {profile.profile_id}) cannot start at memory "
                            f"slice {spec.start}; allowed starts: {{{allowed}}}")
            continue
        per_profile[profile.profile_id] += 1
        for memory_slice in placement.slices:
            other = occupied.get(memory_slice)
            if other is not None:
                problems.append(f"{profile.name} at {spec.start} overlaps the instance with "
                                f"profile id {other.profile_id} at {other.start} "
                                f"on memory slice {memory_slice}")
                break
            occupied[memory_slice] = spec
    for profile_id, count in per_profile.items():
        profile = geometry.profile(profile_id)
        if profile is not None and count > profile.max_instances:
            problems.append(f"{count} instances of {profile.name} exceed its cap of "
                            f"{profile.max_instances}")
    if len(instances) > geometry.max_gpu_instances:
        problems.append(f"{len(instances)} instances exceed the GPU's cap of "
                        f"{geometry.max_gpu_instances}")
    problems.extend(_media_problems(geometry, instances))
    return problems


def _media_problems(geometry: MigGeometry, instances: list[MigInstanceSpec]) -> list[str]:
    placed = [(spec, geometry.profile(spec.profile_id)) for spec in instances]
    placed = [(spec, profile) for spec, profile in placed if profile is not None]
    problems = []
    for spec, profile in placed:
        if not profile.takes_all_media:
            continue
        for other_spec, other in placed:
            if other_spec is not spec and not other.has_no_media:
                problems.append(f"{profile.name} at {spec.start} takes every media engine; "
                                f"beside it only -me profiles fit, not {other.name} at "
                                f"{other_spec.start}")
    return problems
