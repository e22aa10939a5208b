"""Samples from an agent's `NodeSnapshot`: one per unit value and per labelled value.

The environment and model of a GPU come from the inventory, not the node, so the caller
(the ingest service) passes them in. Process values are not stored yet (process series
are a later slice). `None` values are kept here and skipped by the store.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.tsdb.protocol import Sample, series
from gpufleet.wire.telemetry import NodeSnapshot

# gpu_uuid → (environment, model)
Placement = Callable[[str], tuple[str, str]]


def samples_from_snapshot(snapshot: NodeSnapshot, placement: Placement) -> list[Sample]:
    samples = []
    for unit in snapshot.units:
        environment, model = placement(unit.gpu_uuid)
        attributes = {"node": snapshot.node, "environment": environment, "model": model}
        for name, value in unit.values.items():
            samples.append(Sample(series(name, unit.gpu_uuid, unit.mig_uuid, **attributes),
                                  snapshot.at, value))
        for labelled in unit.labelled:
            samples.append(Sample(series(labelled.metric, unit.gpu_uuid, unit.mig_uuid,
                                         labels=labelled.labels, **attributes),
                                  snapshot.at, labelled.value))
    return samples
