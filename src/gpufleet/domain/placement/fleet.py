"""FleetState: the nodes and GPUs placement sees, and the indexes that keep decisions cheap.

At 100,000 GPUs a decision cannot look at every node, so nodes are indexed by what they
can still take: per pool (GPU model × environment), buckets of nodes by free whole GPUs,
by the largest shared fraction free, by the MIG profiles they can still host, and by free
GPU capacity (for host-only tasks). Inside a bucket, nodes with the same *signature*
(GPU picture + free host resources) are grouped: they are interchangeable, so a policy
scores one of them, not all.

The index is kept current by `Placer.commit` / `release` and by `add_node`, `remove_node`
and `refresh`; code that changes a `NodeState` by hand must call `refresh(name)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpufleet.domain.inventory import SharingMode

from . import mig_plans
from .model import MILLI, GpuState, MigSlot, NodeState

SHARED_LEVEL_MILLI = 50  # width of a shared-fraction bucket
HOST_LEVEL_MILLI = 125  # width of a free-capacity bucket (host-only tasks)
JSON_VERSION = 1

# One GPU as placement sees it: (sharing mode, usable, free milli, MIG layout key, MIG
# layout fixed).
GpuPicture = tuple[str, bool, int, mig_plans.LayoutKey, bool]


def layout_key(gpu: GpuState) -> mig_plans.LayoutKey:
    return tuple(sorted((s.profile_id, s.start, s.bound) for s in gpu.mig_instances))


def free_milli(gpu: GpuState) -> int:
    """Capacity not held by bindings (0 for an unusable GPU): what could still be sold."""
    if not gpu.usable:
        return 0
    if gpu.sharing_mode is SharingMode.EXCLUSIVE:
        return 0 if gpu.whole_bound else MILLI
    if gpu.sharing_mode is SharingMode.SHARED:
        return max(0, MILLI - gpu.used_milli)
    if mig_plans.geometry_of(gpu.model) is None:
        return 0
    return MILLI - mig_plans.bound_milli(gpu.model, layout_key(gpu))


_MODE_NAMES = {mode: mode.value for mode in SharingMode}  # the enum's .value is slow


def picture(gpu: GpuState) -> GpuPicture:
    if gpu.sharing_mode is not SharingMode.MIG:
        return (_MODE_NAMES[gpu.sharing_mode], gpu.usable, free_milli(gpu), (), False)
    layout = layout_key(gpu)
    if not gpu.usable or mig_plans.geometry_of(gpu.model) is None:
        return ("mig", gpu.usable, 0, layout, gpu.mig_fixed)
    return ("mig", True, MILLI - mig_plans.bound_milli(gpu.model, layout), layout,
            gpu.mig_fixed)


@dataclass(frozen=True)
class NodeSummary:
    """What a node can still take, derived from its state; the index is built from it."""

    open: bool  # schedulable and below its task limit
    models: frozenset[str]
    whole_exclusive: int  # usable exclusive GPUs not held
    whole_any: int  # ... plus usable shared GPUs with nothing on them
    shared_max_milli: int  # largest free fraction of a usable shared GPU
    mig_hostable: dict[int, int]  # profile id -> best tier (mig_plans.EXISTING, ...)
    free_milli: int
    signature: tuple  # (sorted GPU pictures, cpu free, memory free, environment, open)
    pictures: dict[str, tuple]  # GPU key -> (model, *picture)
    shape: int = -1  # id of the GPUs' (index, (model, *picture)) in node order
    pictures_id: int = -1  # id of signature[0], the sorted GPU pictures


class TupleIds:
    """Small integer ids for deep tuples that are looked up often: a node's *shape* (each
    GPU's index and (model, *picture), in the node's GPU order — all a plan on the
    node depends on but NVLink peers and host resources) and its sorted GPU pictures.
    Caches keyed by the id hash an int instead of walking the tuple on every lookup.

    An id always means the same tuple (ids are never reused); the table forgets old
    tuples past `limit`, after which a returning one gets a new id (a cache miss, not a
    wrong answer).
    """

    def __init__(self, limit: int = 100_000):
        self._ids: dict[tuple, int] = {}
        self._next = 0
        self.limit = limit

    def __call__(self, value: tuple) -> int:
        found = self._ids.get(value)
        if found is None:
            if len(self._ids) >= self.limit:
                self._ids.clear()
            found = self._ids[value] = self._next
            self._next += 1
        return found


# What one GPU adds to its node's summary: (model, *picture); whether it is a free
# exclusive GPU, a free whole GPU (exclusive, or shared with nothing on it); the free
# fraction of a usable shared GPU (else 0); the MIG profiles it can host, with tiers.
GpuView = tuple[tuple, int, int, int, tuple[tuple[int, int], ...]]
_VIEWS: dict[tuple, GpuView] = {}  # by the GPU's state: a few hundred distinct ones


def _view(gpu: GpuState) -> GpuView:
    if gpu.sharing_mode is SharingMode.MIG:
        key: tuple = (gpu.model, gpu.usable, layout_key(gpu), gpu.mig_fixed)
    else:
        key = (gpu.model, gpu.sharing_mode, gpu.usable, gpu.whole_bound, gpu.used_milli)
    found = _VIEWS.get(key)
    if found is not None:
        return found
    full = (gpu.model, *picture(gpu))
    exclusive = any_ = shared = 0
    tiers: tuple[tuple[int, int], ...] = ()
    if gpu.usable:
        if gpu.sharing_mode is SharingMode.EXCLUSIVE:
            exclusive = any_ = int(not gpu.whole_bound)
        elif gpu.sharing_mode is SharingMode.SHARED:
            any_ = int(gpu.used_milli == 0)
            shared = MILLI - gpu.used_milli
        elif mig_plans.geometry_of(gpu.model) is not None:
            tiers = mig_plans.best_tiers(gpu.model, full[4], gpu.mig_fixed)
    if len(_VIEWS) > 100_000:
        _VIEWS.clear()
    found = _VIEWS[key] = (full, exclusive, any_, shared, tiers)
    return found


def summarise(node: NodeState, ids: TupleIds | None = None) -> NodeSummary:
    whole_exclusive = whole_any = shared_max = free_total = 0
    hostable: dict[int, int] = {}
    pictures = {}
    shape = []
    for gpu in node.gpus:
        full, exclusive, any_, shared, tiers = _view(gpu)
        pictures[gpu.key] = full
        shape.append((gpu.index, full))
        free_total += full[3]
        whole_exclusive += exclusive
        whole_any += any_
        if shared > shared_max:
            shared_max = shared
        for profile_id, tier in tiers:
            if tier < hostable.get(profile_id, mig_plans.REPARTITION + 1):
                hostable[profile_id] = tier
    open_ = node.schedulable and (node.max_tasks is None or node.tasks < node.max_tasks)
    sorted_pictures = tuple(sorted(pictures.values()))
    signature = (sorted_pictures, node.cpu_milli_free, node.memory_mib_free,
                 node.environment, open_)
    return NodeSummary(open_, frozenset(g.model for g in node.gpus), whole_exclusive,
                       whole_any, shared_max, hostable, free_total, signature, pictures,
                       -1 if ids is None else ids(tuple(shape)),
                       -1 if ids is None else ids(sorted_pictures))


Bucket = dict[tuple, dict[str, None]]  # signature -> names (an ordered set)


class Pool:
    """Nodes of one (model, environment), bucketed by what they can take."""

    def __init__(self, model: str, environment: str):
        self.model = model
        self.environment = environment
        self.whole_exclusive: dict[int, Bucket] = {}
        self.whole_any: dict[int, Bucket] = {}
        self.shared: dict[int, Bucket] = {}
        self.mig: dict[tuple[int, int], Bucket] = {}  # (profile id, best tier)
        self.host: dict[int, Bucket] = {}
        self.task_limited: dict[str, None] = {}  # schedulable nodes at their task limit
        self.max_gpus = 0


class FleetState:
    """The mutable fleet a `Placer` decides against; see the module docstring."""

    def __init__(self, nodes: Iterable[NodeState]):
        self._nodes: dict[str, NodeState] = {}
        self._gpus: dict[str, tuple[GpuState, str]] = {}
        self._summaries: dict[str, NodeSummary] = {}
        self._entries: dict[str, list[tuple[dict, int, tuple]]] = {}
        self.pools: dict[tuple[str, str], Pool] = {}
        self.models: dict[str, int] = {}  # model -> GPUs of it
        self.ids = TupleIds()  # node shapes and sorted GPU pictures (NodeSummary)
        # free CPU and free GPU capacity over the open nodes that have both tracked CPU and
        # free GPU capacity: whether the fleet runs out of CPU first (the default policy)
        self.open_free_cpu_milli = 0
        self.open_free_gpu_milli = 0
        for node in nodes:
            self.add_node(node)

    # --- lookups ---------------------------------------------------------------------
    def node(self, name: str) -> NodeState:
        return self._nodes[name]

    def gpu(self, key: str) -> GpuState:
        return self._gpus[key][0]

    @property
    def gpu_keys(self):
        return self._gpus.keys()

    def node_of_gpu(self, key: str) -> NodeState:
        return self._nodes[self._gpus[key][1]]

    def summary(self, name: str) -> NodeSummary:
        return self._summaries[name]

    @property
    def nodes(self) -> Iterator[NodeState]:
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    # --- changes ---------------------------------------------------------------------
    def add_node(self, node: NodeState) -> None:
        """Add a node (or replace one of the same name) and index it."""
        if node.name in self._nodes:
            self.remove_node(node.name)
        for gpu in node.gpus:
            if gpu.key in self._gpus:
                raise ValueError(f"GPU {gpu.key} is on two nodes: "
                                 f"{self._gpus[gpu.key][1]} and {node.name}")
        self._nodes[node.name] = node
        for gpu in node.gpus:
            self._gpus[gpu.key] = (gpu, node.name)
            self.models[gpu.model] = self.models.get(gpu.model, 0) + 1
        self._index(node)

    def remove_node(self, name: str) -> NodeState:
        self._unindex(name)
        node = self._nodes.pop(name)
        for gpu in node.gpus:
            del self._gpus[gpu.key]
            self.models[gpu.model] -= 1
            if not self.models[gpu.model]:
                del self.models[gpu.model]
        return node

    def refresh(self, name: str) -> None:
        """Re-index a node after its state changed outside a `Placer`."""
        self._unindex(name)
        self._index(self._nodes[name])

    # --- the index -------------------------------------------------------------------
    def _pool(self, model: str, environment: str) -> Pool:
        pool = self.pools.get((model, environment))
        if pool is None:
            pool = self.pools[(model, environment)] = Pool(model, environment)
        return pool

    def _index(self, node: NodeState) -> None:
        summary = summarise(node, self.ids)
        self._summaries[node.name] = summary
        if summary.open and summary.free_milli and node.cpu_milli_free is not None:
            self.open_free_cpu_milli += node.cpu_milli_free
            self.open_free_gpu_milli += summary.free_milli
        entries: list[tuple[dict, int, tuple]] = []
        self._entries[node.name] = entries
        for model in summary.models:
            pool = self._pool(model, node.environment)
            of_model = (len(node.gpus) if len(summary.models) == 1
                        else sum(g.model == model for g in node.gpus))
            pool.max_gpus = max(pool.max_gpus, of_model)
            if not summary.open:
                if node.schedulable:
                    pool.task_limited[node.name] = None
                    entries.append((pool.task_limited, node.name, ()))
                continue
            places = [(pool.host, summary.free_milli // HOST_LEVEL_MILLI)]
            if summary.whole_exclusive:
                places.append((pool.whole_exclusive, summary.whole_exclusive))
            if summary.whole_any:
                places.append((pool.whole_any, summary.whole_any))
            if summary.shared_max_milli:
                places.append((pool.shared, summary.shared_max_milli // SHARED_LEVEL_MILLI))
            places.extend((pool.mig, (profile_id, tier))
                          for profile_id, tier in summary.mig_hostable.items())
            for levels, level in places:
                bucket = levels.get(level)
                if bucket is None:
                    bucket = levels[level] = {}
                names = bucket.get(summary.signature)
                if names is None:
                    names = bucket[summary.signature] = {}
                names[node.name] = None
                entries.append((levels, level, summary.signature))

    def _unindex(self, name: str) -> None:
        for levels, level, signature in self._entries.pop(name, ()):
            if level == name:
                del levels[name]
                continue
            bucket = levels[level]
            names = bucket[signature]
            del names[name]
            if not names:
                del bucket[signature]
                if not bucket:
                    del levels[level]
        summary = self._summaries.pop(name, None)
        # the summary holds the free CPU the node was indexed with (signature[1])
        if (summary is not None and summary.open and summary.free_milli
                and summary.signature[1] is not None):
            self.open_free_cpu_milli -= summary.signature[1]
            self.open_free_gpu_milli -= summary.free_milli

    # --- JSON ------------------------------------------------------------------------
    def to_json(self) -> dict:
        """Plain JSON data (`from_json` reads it back): what the API serves for what-if."""
        return {"version": JSON_VERSION, "nodes": [_node_json(n) for n in self._nodes.values()]}

    @classmethod
    def from_json(cls, data: dict) -> FleetState:
        """A fleet from `to_json` data; ValueError naming the first problem if malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
            raise ValueError("fleet state JSON must be an object with a 'nodes' list")
        if data.get("version", JSON_VERSION) != JSON_VERSION:
            raise ValueError(f"fleet state JSON version {data.get('version')!r} is not "
                             f"supported (expected {JSON_VERSION})")
        nodes = []
        for number, item in enumerate(data["nodes"]):
            try:
                nodes.append(_node_from_json(item))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"fleet state JSON: nodes[{number}] is malformed: "
                                 f"{exc!r}") from None
        return cls(nodes)


def _node_json(node: NodeState) -> dict:
    return {
        "name": node.name, "environment": node.environment, "schedulable": node.schedulable,
        "cpu_milli_free": node.cpu_milli_free, "memory_mib_free": node.memory_mib_free,
        "max_tasks": node.max_tasks, "tasks": node.tasks,
        "gpus": [{
            "key": g.key, "index": g.index, "model": g.model,
            "sharing_mode": g.sharing_mode.value, "usable": g.usable,
            "whole_bound": g.whole_bound, "used_milli": g.used_milli,
            "mig_instances": [{"profile_id": s.profile_id, "start": s.start, "bound": s.bound}
                              for s in g.mig_instances],
            "mig_fixed": g.mig_fixed,
            "nvlink_peers": sorted(g.nvlink_peers),
        } for g in node.gpus],
    }


def _optional_int(value: object) -> int | None:
    return None if value is None else int(value)


def _node_from_json(item: dict) -> NodeState:
    gpus = [GpuState(
        key=str(g["key"]), index=int(g["index"]), model=str(g["model"]),
        sharing_mode=SharingMode(g["sharing_mode"]), usable=bool(g.get("usable", True)),
        whole_bound=bool(g.get("whole_bound", False)), used_milli=int(g.get("used_milli", 0)),
        mig_instances=[MigSlot(int(s["profile_id"]), int(s["start"]), bool(s.get("bound")))
                       for s in g.get("mig_instances", [])],
        mig_fixed=bool(g.get("mig_fixed", False)),
        nvlink_peers=frozenset(str(p) for p in g.get("nvlink_peers", [])),
    ) for g in item["gpus"]]
    return NodeState(
        name=str(item["name"]), gpus=gpus, environment=str(item.get("environment", "")),
        schedulable=bool(item.get("schedulable", True)),
        cpu_milli_free=_optional_int(item.get("cpu_milli_free")),
        memory_mib_free=_optional_int(item.get("memory_mib_free")),
        max_tasks=_optional_int(item.get("max_tasks")), tasks=int(item.get("tasks", 0)),
    )
