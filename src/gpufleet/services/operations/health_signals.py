"""Read what the health rules look at, for the whole fleet at once, from the telemetry
store: counter increases, the latest state flags, the share of throttled samples.

A few fleet-wide queries per evaluation, never one per GPU. A counter's increase over the
window [now - window, now) is the store's own (resets count from 0) plus the step from the
last sample before the window; a series the store has not seen before the window counts
its value as new only where the counter starts at zero when its reader starts (XIDs: the
reader counts since it started). Aggregate ECC and NVLink totals persist across reboots,
so a GPU first seen with an old total is not failing now (docs/operations.md, "GPU health
and quarantine").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from gpufleet.domain.inventory import canonical_gpu_uuid
from gpufleet.domain.operations.health_rules import (
    POWER_SLOWDOWN_BITS,
    THERMAL_SLOWDOWN_BITS,
    GpuSignals,
    Reading,
)
from gpufleet.domain.operations.mig_health import CONTAINED_XIDS
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, Comparison, OverTime
from gpufleet.services.telemetry.first_values import SEEN_BEFORE
from gpufleet.tsdb import TelemetryStore, ValueFilter
from gpufleet.tsdb.protocol import Filters, Tier

NVLINK_ERROR_METRICS = ("gpu.nvlink_crc_flit_errors_total", "gpu.nvlink_crc_data_errors_total",
                        "gpu.nvlink_replay_errors_total")
THROTTLE_STEP = timedelta(minutes=1)

Key = tuple[str, ...]  # (gpu_uuid,) or (gpu_uuid, xid) or (gpu_uuid, mig_uuid, xid)
InstanceKey = tuple[str, str]  # (canonical GPU UUID, MIG UUID as reported)


def counter_increases(store: TelemetryStore, metric: str, now: datetime, window: timedelta,
                      *, extra_label: str | None = None, new_series_counts: bool,
                      filters: Filters | None = None,
                      per_instance: bool = False) -> dict[Key, Reading]:
    """Each series' increase over [now - window, now), keyed by GPU (and `extra_label`),
    with the time of its latest sample; series that did not rise are left out.
    `per_instance`: keyed by (GPU, MIG instance, ...) too, and only the series a MIG
    instance's events were filed under (a whole GPU's have no `mig_uuid`)."""
    group_by = ("gpu_uuid", "mig_uuid") if per_instance else ("gpu_uuid",)
    if extra_label is not None:
        group_by += (extra_label,)
    start = now - window
    edge = start - window / 2
    buckets = max(1, -(-int(SEEN_BEFORE.total_seconds())
                       // max(1, int(window.total_seconds()))))
    filters = _may_have_risen(store, metric, start - buckets * window, now, filters,
                              new_series_counts, since=start)
    if filters is None:
        return {}
    results = store.query_range(metric, start - buckets * window, now, window,
                                filters=filters, group_by=group_by,
                                over_time=OverTime.INCREASE, across=AcrossSeries.SUM,
                                tier=Tier.RAW)
    latest: dict[Key, Reading] = {}  # summed over the series of a key, as the query sums
    for v in store.latest(filters, metric=metric, since=start):
        key = _key(v.series.label, group_by)
        before = latest.get(key)
        latest[key] = Reading(v.value, v.at) if before is None else \
            Reading(before.value + v.value, max(before.at, v.at))
    out: dict[Key, Reading] = {}
    for result in results:
        key = _key(result.labels.get, group_by)
        last = latest.get(key)
        if last is None or (per_instance and key[1] in ("", "None")):
            continue
        # Points are at their step's start, in whole ms: the window's own step starts at
        # `start` give or take a millisecond, every earlier one a window or more before.
        seen_before = any(at < edge for at, _ in result.points)
        inside = sum(value for at, value in result.points if at >= edge)
        if not seen_before and new_series_counts:
            inside = max(inside, last.value)
        if inside > 0:
            out[key] = Reading(inside, last.at)
    return out


def _may_have_risen(store: TelemetryStore, metric: str, lo: datetime, now: datetime,
                    filters: Filters | None, new_series_counts: bool, *,
                    since: datetime) -> Filters | None:
    """`filters` narrowed to the GPUs whose counter may have risen (None: none may have).
    Asked of the store with a value filter, so a fleet of quiet counters answers a handful
    of GPUs, not a series each (~1 s of CPU per counter at 100,000 GPUs): an increase over
    all of [lo, now) in one step — a superset of the window's, which is folded from the
    same reach — and, where a new series' value counts, every series whose latest value
    since `since` is above zero."""
    risen = store.query_range(metric, lo, now, now - lo + THROTTLE_STEP,
                              filters=filters, group_by=("gpu_uuid",),
                              over_time=OverTime.INCREASE, across=AcrossSeries.SUM,
                              tier=Tier.RAW, where=_ABOVE_ZERO)
    gpus = {str(r.labels["gpu_uuid"]) for r in risen}
    if new_series_counts:
        gpus |= {v.series.gpu_uuid for v in store.latest(filters, metric=metric, since=since,
                                                          where=_ABOVE_ZERO)}
    if not gpus:
        return None
    return {**(filters or {}), "gpu_uuid": sorted(gpus)}


_ABOVE_ZERO = ValueFilter(Comparison.GT, 0.0)
_SET = ValueFilter(Comparison.GE, 1.0)


def stored_spellings(uuid: str) -> list[str]:
    """The spellings a GPU's series may carry in the telemetry store (as its agent
    reported the UUID: NVML's `GPU-` prefix and lowercase hex, or all upper case)."""
    return sorted({uuid, uuid.upper(), uuid.lower(), canonical_gpu_uuid(uuid)})


def _key(label: Callable[[str], object], group_by: tuple[str, ...]) -> Key:
    """(canonical GPU UUID, extra label values...): the store keeps UUIDs as reported."""
    return (canonical_gpu_uuid(str(label(group_by[0]))),
            *(str(label(name)) for name in group_by[1:]))


def latest_flags(store: TelemetryStore, metric: str, since: datetime,
                 filters: Filters | None = None) -> dict[str, Reading]:
    """The latest value of a per-GPU flag, per GPU whose flag is set (≥ 1: the rules
    judge nothing less; compared in the store), whole-GPU series only."""
    return {canonical_gpu_uuid(v.series.gpu_uuid): Reading(v.value, v.at)
            for v in store.latest(filters, metric=metric, since=since, where=_SET)
            if v.series.mig_uuid is None}


def throttle_shares(store: TelemetryStore, now: datetime, window: timedelta,
                    filters: Filters | None = None
                    ) -> dict[str, tuple[Reading, Reading, timedelta]]:
    """Per GPU: the share of minutes with a thermal slowdown reason set, with a power one,
    and how long the minutes read span."""
    results = store.query_range("gpu.clock_throttle_reasons", now - window, now,
                                THROTTLE_STEP, filters=filters, group_by=("gpu_uuid",),
                                over_time=OverTime.LAST, across=AcrossSeries.MAX,
                                tier=Tier.RAW)
    out = {}
    for result in results:
        points = result.points
        if not points:
            continue
        n = len(points)
        thermal = sum(1 for _, v in points if int(v) & THERMAL_SLOWDOWN_BITS) / n
        power = sum(1 for _, v in points if int(v) & POWER_SLOWDOWN_BITS) / n
        last_at = points[-1][0] + THROTTLE_STEP
        span = last_at - points[0][0]
        at = min(last_at, now)
        uuid = canonical_gpu_uuid(str(result.labels.get("gpu_uuid")))
        out[uuid] = (Reading(thermal, at), Reading(power, at), span)
    return out


def instance_xids(store: TelemetryStore, now: datetime, window: timedelta, *,
                  uuids: list[str] | None = None) -> dict[InstanceKey, dict[int, Reading]]:
    """The XIDs whose events named a MIG instance, per (GPU, MIG UUID): the series the
    agent filed under the instance (NVML's gpuInstanceId; docs/operations.md, "MIG
    instances"). A backend that cannot say which instance files them under the GPU, and
    they are the GPU's alone."""
    filters: Filters | None = {"gpu_uuid": uuids} if uuids is not None else None
    found: dict[InstanceKey, dict[int, Reading]] = defaultdict(dict)
    for (gpu, mig, code), reading in counter_increases(
            store, "gpu.xid_errors_total", now, window, extra_label="xid",
            new_series_counts=True, filters=filters, per_instance=True).items():
        if code.isdigit():
            found[(gpu, mig)][int(code)] = reading
    return dict(found)


def contained_per_gpu(xids: Mapping[InstanceKey, Mapping[int, Reading]]) -> dict[str, float]:
    """Per GPU, how many contained errors (XID 94) its instances' events named."""
    out: dict[str, float] = defaultdict(float)
    for (gpu, _), codes in xids.items():
        out[gpu] += sum(r.value for code, r in codes.items() if code in CONTAINED_XIDS)
    return dict(out)


def read_signals(store: TelemetryStore, missing_since: Mapping[str, datetime | None],
                 now: datetime, window: timedelta, *,
                 uuids: list[str] | None = None,
                 contained: Mapping[str, float] | None = None) -> dict[str, GpuSignals]:
    """The signals of every GPU in `missing_since` (its keys: the GPUs to judge; values:
    since when its node's inventory lacks it, or None). `uuids`: read only these GPUs'
    series (as the store keeps them), not the whole fleet's. `contained`: per canonical
    GPU UUID, the contained errors its MIG instances took (`contained_per_gpu`)."""
    filters: Filters | None = {"gpu_uuid": uuids} if uuids is not None else None
    contained = contained or {}
    xids: dict[str, dict[int, Reading]] = defaultdict(dict)
    for (uuid, code), reading in counter_increases(
            store, "gpu.xid_errors_total", now, window, extra_label="xid",
            new_series_counts=True, filters=filters).items():
        if code.isdigit():
            xids[uuid][int(code)] = reading
    ecc = {k[0]: r for k, r in counter_increases(
        store, "gpu.ecc_uncorrected_errors_total", now, window,
        new_series_counts=False, filters=filters).items()}
    nvlink: dict[str, Reading] = {}
    for metric in NVLINK_ERROR_METRICS:
        for (uuid,), r in counter_increases(store, metric, now, window,
                                            new_series_counts=False,
                                            filters=filters).items():
            before = nvlink.get(uuid)
            nvlink[uuid] = r if before is None else \
                Reading(before.value + r.value, max(before.at, r.at))
    since = now - window
    pending = latest_flags(store, "gpu.remapped_rows_pending", since, filters)
    failed = latest_flags(store, "gpu.remapped_rows_failed", since, filters)
    throttle = throttle_shares(store, now, window, filters)
    signals = {}
    for uuid, missing in missing_since.items():
        key = canonical_gpu_uuid(uuid)
        thermal, power, span = throttle.get(key, (None, None, timedelta(0)))
        signals[uuid] = GpuSignals(
            uuid=uuid, window=window, xid_increases=xids.get(key, {}),
            ecc_uncorrected_increase=ecc.get(key), remap_pending=pending.get(key),
            remap_failed=failed.get(key), nvlink_errors_increase=nvlink.get(key),
            thermal_share=thermal, power_share=power, throttle_span=span,
            missing_since=missing, contained_on_instances=contained.get(key, 0))
    return signals
