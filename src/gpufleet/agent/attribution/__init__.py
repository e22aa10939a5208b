"""Who is each GPU process? What the node can tell about a pid's workload (docs/design.md,
"Concepts").

Everything found here is a **claim**. The binding on the server is the truth: usage on a
unit is charged to the allocation bound to it at that time, and a claim that does not
match the binding — or usage on a unit with no binding — is unattributed usage. The agent
gathers claims from three sources (docs/attribution.md):

- the process's cgroup (cgroup.py): container id, Kubernetes pod uid, Slurm job;
- its environment, through an allow-list (environ.py): `GPUFLEET_ALLOCATION`, the
  `GPUFLEET_*` tag keys, `SLURM_JOB_ID`, the downward-API pod name and namespace;
- the tag file that `gpufleet.tag(...)` wrote (tags.py), the process's own and
  those of up to ANCESTORS ancestors of the same owner, so a worker forked by a tagged
  process carries its parent's tags.

Precedence, weakest first — tags: environment, ancestors' files (farthest first), own
file; allocation: `GPUFLEET_ALLOCATION`, then the same files; Slurm job: the cgroup's
(written by slurmd) over `SLURM_JOB_ID` (which any process may set); pod: the downward-API
name when the environment has one, else the pod uid from the cgroup (`Attribution.pod`).

Cost: a collection loop asks about the same long-lived processes every tick, so what
cannot change for a process — cgroup, environment, owner, ancestry — is read once per
(pid, start time) and kept (at most CACHE_SIZE processes). Each ask re-reads the
process's `stat` (a recycled pid is a new process) and `lstat`s its tag files, re-reading
them only when one changed.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.agent.attribution.cgroup import CgroupClaims, parse_cgroup
from gpufleet.agent.attribution.environ import EnvironClaims, read_environ_claims
from gpufleet.agent.attribution.proc import (
    ProcessIdentity,
    ProcessOwner,
    live_pids,
    read_identity,
    read_owner,
    read_text,
)
from gpufleet.agent.attribution.tags import LiveProcesses, TagFileState, TagKey, TagSpool
from gpufleet.tagging import ALLOCATION_KEY, MAX_TAGS, default_tag_dir

ANCESTORS = 3
CACHE_SIZE = 4096
GC_EVERY_S = 300.0


@dataclass(frozen=True)
class Attribution:
    """What the node claims about one process. Every field None / empty where no source
    said anything — a process that is gone or unreadable is just that."""

    pid: int
    name: str | None = None  # the command name (comm), never the command line
    container: str | None = None  # container id (64 hex) from the cgroup
    pod_uid: str | None = None  # from the cgroup
    pod_name: str | None = None  # from the environment (downward API)
    namespace: str | None = None  # from the environment (downward API)
    slurm_job: str | None = None
    claimed_allocation: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def pod(self) -> str | None:
        """The pod as the snapshot names it: its name where known, else its uid."""
        return self.pod_name or self.pod_uid

    def snapshot_fields(self) -> dict[str, Any]:
        """The attribution fields of `wire.telemetry.ProcessSnapshot`."""
        return {"name": self.name, "container": self.container, "pod": self.pod,
                "namespace": self.namespace, "slurm_job": self.slurm_job,
                "claimed_allocation": self.claimed_allocation, "tags": dict(self.tags)}


@dataclass
class _Known:
    """What is kept about one process between asks."""

    static: Attribution  # cgroup and environment claims, name
    chain: tuple[tuple[TagKey, frozenset[int]], ...]  # tag files: own first, then ancestors
    states: tuple[TagFileState | None, ...] | None = None
    file_claims: tuple[str | None, dict[str, str]] = (None, {})


class Attributor:
    """`attribute(pid)` for the processes a backend lists. `proc_root` is the procfs to
    read (`/host/proc` for an agent in a container); `tag_dir` the spool of
    `gpufleet.tag` (default: `gpufleet.tagging.default_tag_dir()`, resolved now)."""

    def __init__(self, proc_root: Path | str = "/proc", tag_dir: Path | str | None = None, *,
                 cache_size: int = CACHE_SIZE, gc_every_s: float = GC_EVERY_S,
                 monotonic: Callable[[], float] = time.monotonic):
        self.proc = Path(proc_root)
        self.spool = TagSpool(Path(tag_dir) if tag_dir is not None else default_tag_dir())
        self._cache: OrderedDict[tuple[int, int], _Known] = OrderedDict()
        self._cache_size = cache_size
        self._gc_every_s = gc_every_s
        self._monotonic = monotonic
        self._last_gc: float | None = None

    def attribute(self, pid: int) -> Attribution:
        """The claims about `pid` now; an empty Attribution when it is gone or unreadable."""
        identity = read_identity(self.proc, pid)
        if identity is None:
            return Attribution(pid)
        key = (pid, identity.start_ticks)
        known = self._cache.get(key)
        if known is None:
            known = self._learn(identity)
            if known is None:
                return Attribution(pid)
            self._remember(key, known)
        else:
            self._cache.move_to_end(key)
        return self._with_tags(known)

    def collect_garbage(self) -> int:
        """Remove the tag files of processes that are gone; how many were removed."""
        self._last_gc = self._monotonic()
        return self.spool.collect_garbage(self._live_processes)

    def collect_garbage_if_due(self) -> int:
        """`collect_garbage` at most every `gc_every_s` (the first call collects)."""
        if self._last_gc is not None and self._monotonic() - self._last_gc < self._gc_every_s:
            return 0
        return self.collect_garbage()

    # -- reading a process once ------------------------------------------------------------
    def _learn(self, identity: ProcessIdentity) -> _Known | None:
        pid = identity.pid
        owner = read_owner(self.proc, pid)
        cgroup = parse_cgroup(read_text(self.proc / str(pid) / "cgroup") or "")
        environ = read_environ_claims(self.proc / str(pid) / "environ")
        if owner is None or read_identity(self.proc, pid) != identity:
            return None  # gone, or the pid recycled while it was read: next tick tries again
        chain = tuple(self._tag_chain(identity, owner))
        return _Known(_static(identity, cgroup, environ), chain)

    def _tag_chain(self, identity: ProcessIdentity, owner: ProcessOwner,
                   ) -> Iterator[tuple[TagKey, frozenset[int]]]:
        """The tag file keys of the process and its ancestors of the same owner."""
        for depth in range(ANCESTORS + 1):
            key = _tag_key(identity, owner)
            if key is not None:
                yield key, owner.uids
            if depth == ANCESTORS or identity.ppid <= 1:
                return
            parent = read_identity(self.proc, identity.ppid)
            parent_owner = None if parent is None else read_owner(self.proc, parent.pid)
            if parent is None or parent_owner is None or parent_owner.uids != owner.uids:
                return
            identity, owner = parent, parent_owner

    def _remember(self, key: tuple[int, int], known: _Known) -> None:
        for stale in [k for k in self._cache if k[0] == key[0]]:
            del self._cache[stale]  # the same pid, an earlier process
        self._cache[key] = known
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    # -- tags, re-read when a file changes ---------------------------------------------------
    def _with_tags(self, known: _Known) -> Attribution:
        states = tuple(self.spool.state(key, uids) for key, uids in known.chain)
        if states != known.states:
            known.states = states
            known.file_claims = self._read_files(known.chain, states)
        allocation, file_tags = known.file_claims
        static = known.static
        if not file_tags and allocation is None:
            return static
        tags = _bounded({**file_tags, **{k: v for k, v in static.tags.items()
                                          if k not in file_tags}})
        return replace(static, claimed_allocation=allocation or static.claimed_allocation,
                       tags=tags)

    def _read_files(self, chain: tuple[tuple[TagKey, frozenset[int]], ...],
                    states: tuple[TagFileState | None, ...],
                    ) -> tuple[str | None, dict[str, str]]:
        merged: dict[str, str] = {}
        for (key, uids), state in reversed(list(zip(chain, states, strict=True))):
            if state is not None:
                merged.update(self.spool.read(key, uids))
        allocation = merged.pop(ALLOCATION_KEY, None)
        return allocation, merged

    def _live_processes(self) -> LiveProcesses:
        keys: set[TagKey] = set()
        unresolved: set[int] = set()
        for pid in live_pids(self.proc):
            identity = read_identity(self.proc, pid)
            if identity is None:
                continue  # gone meanwhile
            owner = read_owner(self.proc, pid)
            key = None if owner is None else _tag_key(identity, owner)
            if key is None:
                unresolved.add(identity.start_ticks)
            else:
                keys.add(key)
        return LiveProcesses(frozenset(keys), frozenset(unresolved))


def _tag_key(identity: ProcessIdentity | None, owner: ProcessOwner) -> TagKey | None:
    if identity is None or owner.pid_namespace is None or owner.namespace_pid is None:
        return None
    return owner.pid_namespace, owner.namespace_pid, identity.start_ticks


def _static(identity: ProcessIdentity, cgroup: CgroupClaims, environ: EnvironClaims,
            ) -> Attribution:
    return Attribution(
        pid=identity.pid, name=identity.name or None, container=cgroup.container,
        pod_uid=cgroup.pod_uid, pod_name=environ.pod_name, namespace=environ.namespace,
        slurm_job=cgroup.slurm_job or environ.slurm_job,
        claimed_allocation=environ.claimed_allocation, tags=_bounded(environ.tags))


def _bounded(tags: dict[str, str]) -> dict[str, str]:
    """At most MAX_TAGS tags, the first ones kept (the caller puts the stronger first)."""
    return tags if len(tags) <= MAX_TAGS else dict(list(tags.items())[:MAX_TAGS])
