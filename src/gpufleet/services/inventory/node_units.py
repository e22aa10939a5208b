"""Which GPUs each node holds, and which node holds each GPU, kept in memory for telemetry
ingest.

Every upload must be checked against the inventory (a node writes only its own GPUs) and
its series stamped with each GPU's environment and model. Reading that from the state
store for every batch would put a query on the hot path of the busiest endpoint, so it is
read once per node and kept: dropped when the node registers again (its GPUs may have
changed) and re-read after `max_age_s` (a change made through another server process).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.store.tables import Environment, Gpu, Node
from gpufleet.tsdb import SeriesLabels


@dataclass(frozen=True)
class NodeUnits:
    node: str
    # gpu_uuid → (environment, model)
    gpus: dict[str, tuple[str, str]]
    # Ingest's cache of the node's series labels (a node sends the same series in every
    # upload); it lives and dies with this reading of the inventory.
    series_labels: dict[tuple, SeriesLabels] = field(default_factory=dict, compare=False)


def read_node_units(session: Session, node: str) -> NodeUnits | None:
    """The node's GPUs as the inventory has them; None for a node it does not know."""
    if session.scalar(select(Node.id).where(Node.name == node)) is None:
        return None
    rows = session.execute(
        select(Gpu.uuid, Environment.name, Gpu.model)
        .join(Node, Gpu.node_id == Node.id)
        .join(Environment, Gpu.environment_id == Environment.id)
        .where(Node.name == node)).all()
    return NodeUnits(node, {uuid: (environment, model) for uuid, environment, model in rows})


class NodeUnitsMemo:
    """Thread-safe; `monotonic_s` is injectable for tests."""

    def __init__(self, max_age_s: float, monotonic_s: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self._monotonic_s = monotonic_s
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, NodeUnits]] = {}

    def get(self, node: str, read: Callable[[str], NodeUnits | None]) -> NodeUnits | None:
        now_s = self._monotonic_s()
        with self._lock:
            held = self._known.get(node)
        if held is not None and now_s - held[0] < self.max_age_s:
            return held[1]
        units = read(node)
        if units is not None:
            with self._lock:
                self._known[node] = (now_s, units)
        return units

    def forget(self, node: str) -> None:
        with self._lock:
            self._known.pop(node, None)


def read_gpu_owners(session: Session, gpus: Collection[str]) -> dict[str, str]:
    """GPU UUID → the name of the node the inventory places it on, for the GPUs it has."""
    owners: dict[str, str] = {}
    ordered = sorted(gpus)
    for at in range(0, len(ordered), 500):
        rows = session.execute(select(Gpu.uuid, Node.name).join(Node, Gpu.node_id == Node.id)
                               .where(Gpu.uuid.in_(ordered[at:at + 500])))
        owners.update((uuid, node) for uuid, node in rows)
    return owners


class GpuOwnersMemo:
    """Which node holds each GPU, for remote-write, whose series name their GPU but not
    reliably their node (dcgm-exporter's `Hostname` is its pod's name in Kubernetes unless
    NODE_NAME is set). GPUs the inventory has are remembered for `max_age_s`; one it lacks
    is asked about again in the next body. Thread-safe."""

    def __init__(self, max_age_s: float, monotonic_s: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self._monotonic_s = monotonic_s
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, str]] = {}

    def get(self, gpus: Collection[str],
            read: Callable[[set[str]], dict[str, str]]) -> dict[str, str]:
        """The owner of each of `gpus` the inventory has; one read for all the others."""
        now_s = self._monotonic_s()
        owners: dict[str, str] = {}
        missing: set[str] = set()
        with self._lock:
            for gpu in gpus:
                held = self._known.get(gpu)
                if held is not None and now_s - held[0] < self.max_age_s:
                    owners[gpu] = held[1]
                else:
                    missing.add(gpu)
        if missing:
            found = read(missing)
            owners.update(found)
            with self._lock:
                self._known.update((gpu, (now_s, node)) for gpu, node in found.items())
        return owners

    def forget(self, gpus: Iterable[str]) -> None:
        with self._lock:
            for gpu in gpus:
                self._known.pop(gpu, None)
