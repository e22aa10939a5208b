"""What a remote-write series' labels say, worked out once per series, not once per body.

A Prometheus sends every active series again on each scrape, with the same labels written
the same way: the same serialized label block (`WriteColumns.label_blocks`). Everything
the receiver reads from the labels alone — is it dcgm-exporter's, which GPU, which
catalogue row and source scale, which MIG instance, which workload it names, the row's own
labels, and whether the row can be stored at all — is a pure function of that block, so it
is kept here keyed by the bytes: a known series costs a dict hit instead of parsing nine
labels into a dict and six lookups through the dcgm mapping. What depends on the inventory
(which node holds the GPU, the node's environment and model) is not kept here: it is read
per body as before, so an inventory change needs no invalidation of this cache.

The cache is bounded (`max_series`): when it is full it is emptied and refilled by the
series that come next, which costs a body of misses, never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

from gpufleet.domain.telemetry.dcgm_mapping import (
    UUID_LABELS,
    Address,
    OwnLabels,
    Route,
    Workload,
    address_of,
    derived_mig_uuid,
    own_labels,
    route,
    stored_instance,
    workload_of,
)
from gpufleet.domain.telemetry.sources import Encoding
from gpufleet.services.telemetry.batch_columns import range_of, unit_series_problem
from gpufleet.services.telemetry.remote_write_values import ENCODING_CODES
from gpufleet.wire.remote_write import METRIC_NAME_LABEL
from gpufleet.wire.remote_write_columns import labels_of_block

# ~0.5 KiB a series (its label block and plan): 1,000,000 series hold ~0.5 GiB.
DEFAULT_MAX_SERIES = 1_000_000

_UUID, _OLD_UUID = UUID_LABELS

# The `extra` of rows without labels of their own (most): one shared, never written to.
_NO_EXTRA: dict[str, str] = {}

_FLOAT_CODE = ENCODING_CODES[Encoding.FLOAT]

# (catalogue metric, GPU, GPU instance id, own labels): a store series of the node.
RowKey = tuple[str, str, int | None, OwnLabels]


@dataclass(frozen=True, slots=True)
class SeriesPlan:
    """A series as its labels describe it.

    `gpu` is its GPU UUID label (None: none); `dcgm` whether it is one of dcgm-exporter's
    (a `DCGM_` name and a GPU). `route` None: a name the catalogue does not know, ignored
    as the agent's backend ignores it; `address` None: its unit cannot be told (ignored).
    `row` None: the row cannot be stored (a label of its own missing), though its workload
    still votes. The rest describes the row's store series, inventory aside."""

    gpu: str | None
    dcgm: bool
    route: Route | None = None
    address: Address | None = None
    workload: Workload | None = None
    row: RowKey | None = None
    mig_uuid: str | None = None
    extra: dict[str, str] | None = None
    problem: str | None = None  # unit_series_problem's reason: the row is dropped
    labels_key: tuple | None = None  # node_series_labels' key of the row's store series
    # The route's source's encoding (`ENCODING_CODES`) and scale: a body's values are
    # converted as one numpy column (`remote_write_values.catalogue_values`).
    encoding_code: int = _FLOAT_CODE
    scale: float = 1.0
    # `plain`: a row stored as it is, with nothing else to do (no workload vote, no
    # problem); such a body is built as columns whole (`remote_write_ingest`). `low`,
    # `high`: the values its metric's unit allows (`range_of`).
    plain: bool = False
    low: float = 0.0
    high: float = 0.0


def plan_of(labels: dict[str, str]) -> SeriesPlan:
    """The plan of a series with `labels` (`__name__` among them)."""
    name = labels.get(METRIC_NAME_LABEL) or ""
    gpu = labels.get(_UUID) or labels.get(_OLD_UUID) or None
    if not name.startswith("DCGM_") or not gpu:
        return SeriesPlan(gpu, False)
    to = route(name)
    if to is None:
        return SeriesPlan(gpu, True)
    address = address_of(name, labels)
    if not isinstance(address, Address):
        return SeriesPlan(gpu, True, to)
    code, scale = ENCODING_CODES[to.source.encoding], to.source.scale
    workload = workload_of(labels)
    own = own_labels(to, labels)
    if own is None:
        return SeriesPlan(gpu, True, to, address, workload, encoding_code=code, scale=scale)
    metric = to.metric
    instance = stored_instance(to, address.gpu_instance_id)
    row = (metric.name, address.gpu_uuid, instance, own)
    mig = None if instance is None else derived_mig_uuid(address.gpu_uuid, instance)
    extra = dict(own) if own else _NO_EXTRA
    labels_key = (metric.name, address.gpu_uuid, mig, *extra.items()) if extra else \
        (metric.name, address.gpu_uuid, mig)
    problem = unit_series_problem(metric, mig, extra)
    return SeriesPlan(gpu, True, to, address, workload, row, mig, extra, problem, labels_key,
                      code, scale, workload is None and problem is None, *range_of(metric))


class SeriesPlans:
    """Label block → `SeriesPlan`, bounded; safe to share between request threads (a dict
    read or write is atomic, and two threads planning one new series agree)."""

    def __init__(self, max_series: int = DEFAULT_MAX_SERIES):
        self.max_series = max_series
        self._plans: dict[bytes, SeriesPlan] = {}

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def known_blocks(self) -> Container[bytes]:
        """The label blocks planned (`decode_write_columns`' `known_blocks`): blocks that
        decoder handed out, so each is label fields and nothing else, as long as
        `plans_of` is given only those."""
        return self._plans

    def plans_of(self, blocks: Sequence[bytes]) -> list[SeriesPlan]:
        """Each block's plan. `ValueError` for a block whose labels are not readable or
        lack `__name__` (the whole body is refused, as `decode_write_request` refuses it)."""
        plans = list(map(self._plans.get, blocks))
        if not all(plans):  # (`None in plans` would call each plan's __eq__)
            new: dict[bytes, SeriesPlan] = {}
            labels_seen: dict[bytes, tuple[str, str]] = {}
            for index, plan in enumerate(plans):
                if plan is None:
                    block = blocks[index]
                    plan = new.get(block)
                    if plan is None:
                        plan = new[block] = plan_of(labels_of_block(block, labels_seen))
                    plans[index] = plan
            if len(self._plans) + len(new) > self.max_series:
                self._plans.clear()
            if len(new) <= self.max_series:  # else: more new series in a body than kept
                self._plans.update(new)
        return plans
