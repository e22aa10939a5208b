"""MIG geometry: documented layouts are valid, impossible ones are refused (mig.md §2)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.gpu_models import catalogue, model
from gpufleet.domain.mig import MigGeometry, MigInstanceSpec, layout_problems

MIG_MODELS = sorted(k for k, m in catalogue().items() if m.mig_capable)


def geometry(key: str) -> MigGeometry:
    found = model(key)
    assert found is not None and found.mig is not None
    return found.mig


def layout(*pairs: tuple[int, int]) -> list[MigInstanceSpec]:
    return [MigInstanceSpec(profile_id, start) for profile_id, start in pairs]


# Layouts from mig.md: the guide's examples, transcripts and mig-parted's `all-*` configs.
# Profile ids on A100/H100: 19 = 1g, 20 = 1g+me, 15 = 1g with 2 memory slices, 14 = 2g,
# 9 = 3g, 5 = 4g, 0 = 7g.
VALID = {
    "7 x 1g (all-1g.10gb)": layout(*((19, s) for s in range(7))),
    "4 x 1g.20gb": layout((15, 0), (15, 2), (15, 4), (15, 6)),
    "3 x 2g + 1g": layout((14, 0), (14, 2), (14, 4), (19, 6)),
    "2 x 3g": layout((9, 0), (9, 4)),
    "4g + 3g (transcript)": layout((5, 0), (9, 4)),
    "7g": layout((0, 0)),
    "guide -cgi 9,19,14,19": layout((9, 4), (19, 0), (14, 2), (19, 1)),
    "all-balanced 2 x 1g + 2g + 3g": layout((19, 0), (19, 1), (14, 2), (9, 4)),
    "1g+me beside six 1g": layout((20, 0), *((19, s) for s in range(1, 7))),
    "1g.20gb at 6 beside 3 x 2g": layout((14, 0), (14, 2), (14, 4), (15, 6)),
    "empty": [],
}

INVALID = {
    "two 7g": (layout((0, 0), (0, 0)), "overlaps"),
    "1g inside a 3g": (layout((9, 0), (19, 2)), "overlaps"),
    "4g and 3g at 0": (layout((5, 0), (9, 0)), "overlaps"),
    "2g at an odd start": (layout((14, 1),), "cannot start at memory slice 1"),
    "3g at 2": (layout((9, 2),), "cannot start at memory slice 2"),
    "1g at slice 7": (layout((19, 7),), "cannot start at memory slice 7"),
    "4g at 4": (layout((5, 4),), "cannot start at memory slice 4"),
    "unknown profile": (layout((99, 0),), "profile id 99 does not exist"),
    "two 1g+me": (layout((20, 0), (20, 1)), "exceed its cap of 1"),
    "eight 1g": (layout(*((19, s) for s in range(7)), (19, 0)), "overlaps"),
}


@pytest.mark.parametrize("key", ["H100-80GB", "A100-40GB", "A100-80GB", "H200-141GB"])
@pytest.mark.parametrize("name", VALID)
def test_documented_layouts_are_valid(key, name):
    assert layout_problems(geometry(key), VALID[name]) == []


@pytest.mark.parametrize("key", ["H100-80GB", "A100-40GB"])
@pytest.mark.parametrize("name", INVALID)
def test_impossible_layouts_are_refused(key, name):
    specs, expected = INVALID[name]
    problems = layout_problems(geometry(key), specs)
    assert problems, f"{name} was accepted"
    assert any(expected in p for p in problems), problems


def test_a30_layouts():
    a30 = geometry("A30-24GB")
    assert layout_problems(a30, layout((14, 0), (14, 1), (5, 2))) == []  # 2 x 1g + 2g
    assert layout_problems(a30, layout((0, 0))) == []
    assert layout_problems(a30, layout((5, 1),))  # 2g starts at 0 or 2
    # On A30 profile 14 is 1g.6gb (on H100 it is 2g): ids are per architecture.
    assert a30.profile(14).compute_slices == 1
    assert geometry("H100-80GB").profile(14).compute_slices == 2


def test_instance_cap_is_checked_even_without_overlap():
    # 1g.24gb+me has four free placements on RTX PRO 6000 but a cap of one.
    rtx = geometry("RTX-PRO-6000-96GB")
    problems = layout_problems(rtx, layout((21, 0), (21, 3)))  # 1g.24gb+me, cap 1
    assert any("exceed its cap of 1" in p for p in problems), problems


def test_the_gpu_wide_instance_cap():
    h100 = geometry("H100-80GB")
    specs = layout(*((19, s) for s in range(7)), (15, 6))
    problems = layout_problems(h100, specs)
    assert any("exceed the GPU's cap of 7" in p for p in problems), problems


def test_rtx_pro_media_all_profiles_leave_room_only_for_no_media_profiles():
    """mig.md §2 rule 4: once a `+me.all` GI exists, every other GI must be `-me`."""
    rtx = geometry("RTX-PRO-6000-96GB")
    me_all, no_me, plain, gfx = 65, 67, 14, 47  # 1g.24gb +me.all / -me / plain / +gfx
    assert layout_problems(rtx, layout((me_all, 0), (no_me, 3), (no_me, 6), (no_me, 9))) == []
    assert layout_problems(rtx, layout((plain, 0), (plain, 3), (gfx, 6), (no_me, 9))) == []
    for other in (plain, gfx, 21):
        problems = layout_problems(rtx, layout((me_all, 0), (other, 3)))
        assert any("+me.all" in p for p in problems), (other, problems)
    problems = layout_problems(rtx, layout((64, 0), (5, 6)))  # 2g +me.all beside plain 2g
    assert any("+me.all" in p for p in problems), problems


# --- properties ------------------------------------------------------------------------


@st.composite
def candidate_layouts(draw):
    """A model and instances drawn mostly from allowed placements, so many are valid."""
    key = draw(st.sampled_from(MIG_MODELS))
    geo = geometry(key)
    profile = st.sampled_from(geo.profiles)
    specs = []
    for _ in range(draw(st.integers(0, 9))):
        p = draw(profile)
        starts = [pl.start for pl in p.placements]
        start = draw(st.one_of(st.sampled_from(starts),
                               st.integers(0, geo.memory_slices_total)))
        specs.append(MigInstanceSpec(p.profile_id, start))
    return key, specs


def _occupied(geo: MigGeometry, spec: MigInstanceSpec) -> set[int]:
    placement = geo.profile(spec.profile_id).placement_at(spec.start)
    assert placement is not None
    return set(placement.slices)


@settings(max_examples=250, deadline=None)
@given(candidate_layouts())
def test_accepted_layouts_are_disjoint_and_within_caps(drawn):
    key, specs = drawn
    geo = geometry(key)
    if layout_problems(geo, specs):
        return
    ranges = [_occupied(geo, s) for s in specs]
    for i, a in enumerate(ranges):
        assert a <= set(range(geo.memory_slices_total))
        for b in ranges[i + 1:]:
            assert not a & b
    for profile_id, count in Counter(s.profile_id for s in specs).items():
        assert count <= geo.profile(profile_id).max_instances
    assert len(specs) <= geo.max_gpu_instances
    assert sum(geo.profile(s.profile_id).compute_slices for s in specs) <= \
        geo.compute_slices_total
    assert _media_rule_ok(geo, specs)


def _media_rule_ok(geo: MigGeometry, specs: list[MigInstanceSpec]) -> bool:
    names = [geo.profile(s.profile_id).name for s in specs]
    if not any(n.endswith("+me.all") for n in names):
        return True
    return all(n.endswith("+me.all") or n.endswith("-me") for n in names) and \
        sum(n.endswith("+me.all") for n in names) == 1


@settings(max_examples=250, deadline=None)
@given(candidate_layouts())
def test_layouts_that_obey_every_rule_are_accepted(drawn):
    """The converse: keep only the instances an independent check allows; none is refused."""
    key, drawn_specs = drawn
    geo = geometry(key)
    kept: list[MigInstanceSpec] = []
    used: set[int] = set()
    for spec in drawn_specs:
        placement = geo.profile(spec.profile_id).placement_at(spec.start)
        if placement is None or used & set(placement.slices):
            continue
        candidate = [*kept, spec]
        counts = Counter(s.profile_id for s in candidate)
        if counts[spec.profile_id] > geo.profile(spec.profile_id).max_instances:
            continue
        if len(candidate) > geo.max_gpu_instances or not _media_rule_ok(geo, candidate):
            continue
        kept.append(spec)
        used |= set(placement.slices)
    assert layout_problems(geo, kept) == []


@pytest.mark.parametrize(("model_key", "profile_name", "weight"), [
    ("H100-80GB", "7g.80gb", 1.0),
    ("H100-80GB", "3g.40gb", 0.5),      # 4 of 8 memory slices outweigh 3 of 7 compute
    ("H100-80GB", "1g.10gb", 1 / 7),    # 1 of 7 compute slices outweighs 1 of 8 memory
    ("A30-24GB", "2g.12gb", 0.5),
])
def test_instance_weight_is_the_larger_share_of_the_gpu(model_key, profile_name, weight):
    geometry = model(model_key).mig
    assert geometry.weight(geometry.profile_named(profile_name)) == pytest.approx(weight)
