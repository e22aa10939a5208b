"""How gpufleet's series are named and labelled in a Prometheus-compatible engine: one
function each way (catalogue metric ⇄ exposition name, `SeriesLabels` ⇄ label set).

Its own module so that the store (prometheus_store.py) and the funnel's minute masks
(prometheus_masks.py) both read it, and neither has to import the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from gpufleet.domain.telemetry.catalogue import CATALOGUE
from gpufleet.tsdb.protocol import UNIT_LABELS, SeriesLabels, series
from gpufleet.wire.remote_write import METRIC_NAME_LABEL

EXPOSITION_PREFIX = "gpufleet_"
# Labels a query adds to tell the parts of one answer apart; never written.
PART_LABEL = "gpufleet_part"
RESERVED_LABELS = frozenset((METRIC_NAME_LABEL, PART_LABEL))
# How far past now a "newest value" read looks (the store's `latest`, the masks' memory
# read): samples stamped by a node whose clock runs ahead still count.
LATEST_AHEAD_MS = 3_600_000


def exposition_name(metric: str) -> str:
    """The series name a catalogue metric is stored under: `gpu.sm_active` →
    `gpufleet_gpu_sm_active`. Values are in the catalogue's units (percent, bytes, …), so
    the name is gpufleet's own, never a DCGM field name whose scale differs."""
    return EXPOSITION_PREFIX + metric.replace(".", "_")


@cache
def _catalogue_by_exposition() -> dict[str, str]:
    return {exposition_name(row.name): row.name for row in CATALOGUE}


def catalogue_name(exposition: str) -> str | None:
    """The catalogue metric stored under an exposition name; None for a name that is not
    one of gpufleet's (another job's series in the same engine)."""
    return _catalogue_by_exposition().get(exposition)


def exposition_labels(labels: SeriesLabels) -> dict[str, str]:
    """The labels a series is written with: `__name__`, `gpu_uuid`, `mig_uuid` (absent for
    a whole GPU), `node`, `environment`, `model` (absent when empty) and the metric's extra
    labels."""
    out = {METRIC_NAME_LABEL: exposition_name(labels.metric), "gpu_uuid": labels.gpu_uuid}
    if labels.mig_uuid is not None:
        out["mig_uuid"] = labels.mig_uuid
    for name in ("node", "environment", "model"):
        if getattr(labels, name):
            out[name] = getattr(labels, name)
    out.update(labels.labels)
    return out


def series_of_labels(labels: Mapping[str, str], metric: str | None = None) -> SeriesLabels | None:
    """The series an engine's label set describes (the inverse of `exposition_labels`);
    None where it is not a gpufleet series."""
    metric = metric or catalogue_name(labels.get(METRIC_NAME_LABEL, ""))
    if metric is None or "gpu_uuid" not in labels:
        return None
    extra = {k: v for k, v in labels.items() if k not in UNIT_LABELS and k not in RESERVED_LABELS}
    return series(metric, labels["gpu_uuid"], labels.get("mig_uuid"), labels=extra,
                  node=labels.get("node", ""), environment=labels.get("environment", ""),
                  model=labels.get("model", ""))
