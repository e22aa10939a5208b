"""MIG layouts for simulated GPUs: from profile names to explicit placements, and back.

A fleet spec names a layout the way an operator thinks of it (`[4g.40gb, 3g.40gb]`), but a MIG
instance is keyed by (profile id, placement start) (docs/design.md, "Concepts"), and whether a set
of profiles fits depends on where each one starts: `4g.40gb` can only start at slice 0, so it must
be placed before `3g.40gb` takes that spot. `resolve_layout` searches for explicit placements
(small: at most 7 instances on 8 slices) and then checks the result with the domain's
`layout_problems`, so the simulator never reports a layout the hardware refuses. An entry may pin
its start with `name@start` (or `id@start`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.domain.mig import MigGeometry, MigInstanceSpec, MigProfile, layout_problems
from gpufleet.wire.agent import MigInstanceReport

from . import ids

MIB = 1024**2
LayoutEntry = int | str


class MigLayoutError(ValueError):
    """A layout that names an unknown profile or cannot exist on one GPU."""


def _profile(geometry: MigGeometry, ref: int | str) -> MigProfile | None:
    if isinstance(ref, int):
        return geometry.profile(ref)
    return geometry.profile_named(ref) or (geometry.profile(int(ref)) if ref.isdigit() else None)


def _parse(geometry: MigGeometry, entry: LayoutEntry) -> tuple[MigProfile, int | None]:
    if isinstance(entry, bool):
        raise MigLayoutError(f"{entry!r} is not a MIG profile name or id")
    start: int | None = None
    ref: int | str = entry
    if isinstance(entry, str) and "@" in entry:
        ref, _, start_text = entry.partition("@")
        if not start_text.isdigit():
            raise MigLayoutError(f"{entry!r}: the placement start after '@' must be a number")
        start = int(start_text)
    profile = _profile(geometry, ref)
    if profile is None:
        known = ", ".join(f"{p.name} ({p.profile_id})" for p in geometry.profiles)
        raise MigLayoutError(f"unknown MIG profile {entry!r}; this GPU model has: {known}")
    return profile, start


def _search(wanted: list[MigProfile], occupied: set[int],
            after: tuple[int, int] = (-1, -1)) -> list[int] | None:
    """Starts for `wanted` (in order) that overlap neither `occupied` nor each other.

    `after` is (profile id, start) of the previous instance: instances of one profile take
    increasing starts, so equal instances are not tried in every order.
    """
    if not wanted:
        return []
    profile, rest = wanted[0], wanted[1:]
    for placement in profile.placements:
        if profile.profile_id == after[0] and placement.start <= after[1]:
            continue
        slices = set(placement.slices)
        if slices & occupied:
            continue
        tail = _search(rest, occupied | slices, (profile.profile_id, placement.start))
        if tail is not None:
            return [placement.start, *tail]
    return None


def resolve_layout(geometry: MigGeometry,
                   entries: Sequence[LayoutEntry]) -> tuple[MigInstanceSpec, ...]:
    """Explicit, valid placements for a layout, sorted by start; MigLayoutError otherwise.

    Deterministic: the largest and most constrained profiles are placed first, each at the
    lowest start that still lets the rest fit.
    """
    parsed = [_parse(geometry, e) for e in entries]
    if len(parsed) > geometry.max_gpu_instances:
        raise MigLayoutError(f"{len(parsed)} instances exceed the GPU's cap of "
                             f"{geometry.max_gpu_instances}")
    pinned = [MigInstanceSpec(p.profile_id, s) for p, s in parsed if s is not None]
    problems = layout_problems(geometry, pinned)
    if problems:
        raise MigLayoutError("; ".join(problems))
    occupied = {i for spec in pinned
                for i in geometry.profile(spec.profile_id).placement_at(spec.start).slices}
    free = sorted((p for p, s in parsed if s is None),
                  key=lambda p: (-p.memory_slices, len(p.placements), p.profile_id))
    starts = _search(free, occupied)
    if starts is None:
        names = ", ".join(str(e) for e in entries)
        raise MigLayoutError(f"[{names}] does not fit on one GPU: no placement of these "
                             f"profiles leaves their memory slices disjoint")
    specs = pinned + [MigInstanceSpec(p.profile_id, s) for p, s in zip(free, starts, strict=True)]
    problems = layout_problems(geometry, specs)
    if problems:
        raise MigLayoutError("; ".join(problems))
    return tuple(sorted(specs, key=lambda s: s.start))


def instance_reports(geometry: MigGeometry, layout: Sequence[MigInstanceSpec], *, seed: int,
                     hostname: str, gpu_index: int, gpu_memory_bytes: int,
                     generation: int = 0) -> list[MigInstanceReport]:
    """What NVML would list for a GPU carrying `layout`: one GPU instance per entry, each
    with its default full-size compute instance (id 0). GPU instance ids are numbered in
    placement order; real drivers choose them freely, which is why nothing keys on them."""
    reports = []
    for number, spec in enumerate(layout, start=1):
        profile = geometry.profile(spec.profile_id)
        if profile.memory_gib is not None:
            memory_bytes = round(profile.memory_gib * 1024) * MIB
        else:
            memory_bytes = gpu_memory_bytes * profile.memory_slices // geometry.memory_slices_total
        reports.append(MigInstanceReport(
            profile_id=profile.profile_id,
            placement_start=spec.start,
            placement_size=profile.memory_slices,
            profile_name=profile.name,
            mig_uuid=ids.mig_uuid(seed, hostname, gpu_index, generation, profile.profile_id,
                                  spec.start),
            gpu_instance_id=number,
            compute_instance_id=0,
            memory_bytes=memory_bytes,
        ))
    return reports
