"""The live fleet kept in memory between grants: the placement cache.

Reading every usable GPU from the state store for each grant costs about a second at
100,000 GPUs. The cache reads the fleet once and then follows it:

- a grant decided here is applied to it at once (`Placer.commit`), so the next decision
  sees it without a read;
- every other change to what placement sees — releases and expiries, registrations,
  cordons, quarantines, reachability — marks the nodes involved stale, and the next
  decision re-reads just those nodes;
- a full re-read happens once the cache is older than `max_age_s`, which bounds how long a
  change made by another server process can stay unseen. It runs beside the grants
  (`read_fleet` in another thread, then `install`), since at 100,000 GPUs it takes seconds:
  the nodes that grants and re-reads touched while it read are re-read once it is in.

The cache is never the guard. The slot claims and the conditional shared-GPU update refuse a unit
that is no longer free (docs/design.md, "Placement"); the grant then marks the nodes it touched
stale and tries again. Deciding is serialised by the caller (`Lifecycle`'s grant lock): the marks
are the only part other threads touch, under a lock of their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

from sqlalchemy.orm import Session

from gpufleet.domain.placement import (
    Decision,
    Demand,
    FleetState,
    Placer,
    Refusal,
)
from gpufleet.domain.requests import FlavourKind
from gpufleet.services.lifecycle import placement_state
from gpufleet.services.lifecycle.placement_state import MODE_OF_KIND, LiveFleet, free_milli_by_mode

log = logging.getLogger(__name__)

FreeKey = tuple[str, str]  # (sharing mode, model)


class PlacementCache:
    def __init__(self, policy: str, max_age_s: float,
                 monotonic: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._live: LiveFleet | None = None
        self._placer: Placer | None = None
        self._loaded_at = 0.0
        self._free_milli: Counter[FreeKey] = Counter()
        self._models: dict[str, set[str]] = {}  # sharing mode -> models
        self._names_by_id: dict[int, str] = {}
        self._marks_lock = threading.Lock()
        self._stale: set[str] = set()
        self._all_stale = True
        self._touched_while_reading: set[str] | None = None  # None: no full re-read running
        # Nodes were (re-)read since the granter last tried its queue of approved requests:
        # units may have come free there, and the queue has the first claim on them.
        self.changed_since_queue = True

    # --- marks (any thread) ----------------------------------------------------------
    def mark_stale(self, node_names: Iterable[str]) -> None:
        """The named nodes changed in the state store; re-read them before deciding."""
        with self._marks_lock:
            self._stale.update(node_names)

    def mark_stale_ids(self, node_ids: Iterable[int]) -> None:
        """As `mark_stale`, by node id. A node the cache never held was not usable when it
        was read; if it became usable since, whoever changed it marked it by name."""
        names = [self._names_by_id[i] for i in node_ids if i in self._names_by_id]
        self.mark_stale(names)

    def mark_all_stale(self) -> None:
        with self._marks_lock:
            self._all_stale = True

    def observe_node(self, name: str, ready: bool) -> None:
        """A cheap consistency check from the heartbeat: a ready node the cache lacks, or a
        node it holds that is no longer ready, is re-read."""
        live = self._live
        if live is not None and ready != (name in live.node_ids):
            self.mark_stale([name])

    # --- deciding (one caller at a time) --------------------------------------------
    def refresh(self, session: Session) -> bool:
        """Bring the cache up to date where marked stale; call before deciding. True when
        it is older than `max_age_s`: the caller starts a full re-read beside the grants
        (`begin_full_read`, `read_fleet`, `install`); until it is in, this copy serves."""
        with self._marks_lock:
            stale, self._stale = self._stale, set()
            everything = self._all_stale or self._live is None
            self._all_stale = False
        if everything:
            self._load_all(session)
        elif stale:
            self._reload(session, stale)
        self.changed_since_queue |= everything or bool(stale)
        return (self._touched_while_reading is None
                and self._monotonic() - self._loaded_at > self.max_age_s)

    def begin_full_read(self) -> float:
        """A full re-read starts now (call with deciding serialised); from here on, every
        node a decision or a re-read touches is noted, to be re-read after `install`."""
        self._touched_while_reading = set()
        return self._monotonic()

    def read_fleet(self, session: Session) -> tuple[LiveFleet, dict[str, set[str]]]:
        """The whole fleet as the store has it; safe beside deciding (touches nothing)."""
        return placement_state.load(session), placement_state.models_by_mode(session)

    def install(self, fleet: tuple[LiveFleet, dict[str, set[str]]], started_at: float) -> None:
        """Serve from a full re-read begun at `started_at` (call with deciding serialised).
        What changed through this cache while it was read may be missing from it: those
        nodes are re-read before the next decision."""
        touched, self._touched_while_reading = self._touched_while_reading or set(), None
        self._use(*fleet, started_at)
        self.changed_since_queue = True
        self.mark_stale(touched)

    def abandon_full_read(self) -> None:
        self._touched_while_reading = None

    @property
    def live(self) -> LiveFleet:
        assert self._live is not None, "refresh() first"
        return self._live

    def models(self, kind: FlavourKind) -> list[str]:
        """Models of `kind`'s sharing mode in the fleet (usable or not when last read)."""
        return sorted(self._models.get(MODE_OF_KIND[kind].value, ()))

    def decide(self, demand: Demand) -> Decision | Refusal:
        assert self._placer is not None, "refresh() first"
        return self._placer.decide(demand)

    def preview(self, demand: Demand) -> Decision | Refusal:
        """What `decide` would answer, changing nothing (`Placer.preview`)."""
        assert self._placer is not None, "refresh() first"
        return self._placer.preview(demand)

    def commit(self, decision: Decision) -> None:
        """Apply a decision the caller is about to write (StaleDecision: nothing applied)."""
        assert self._placer is not None
        nodes = [self._placer.fleet.node(name) for name in decision.nodes]
        self._note_touched(decision.nodes)
        before = free_milli_by_mode(nodes)
        self._placer.commit(decision)
        self._free_milli.subtract(before)
        self._free_milli.update(free_milli_by_mode(nodes))

    def free_milli(self, kind: FlavourKind, model: str) -> int:
        """Free milli-GPU of usable GPUs of `model` in `kind`'s sharing mode, fleet-wide."""
        return self._free_milli[(MODE_OF_KIND[kind].value, model)]

    # --- reading ---------------------------------------------------------------------
    def _load_all(self, session: Session) -> None:
        started = self._monotonic()
        self._use(*self.read_fleet(session), started)

    def _use(self, live: LiveFleet, models: dict[str, set[str]], started: float) -> None:
        workload = self._placer.workload if self._placer is not None else None
        self._live = live
        self._placer = Placer(live.state, self.policy, workload=workload)
        self._names_by_id = {node_id: name for name, node_id in live.node_ids.items()}
        self._models = models
        self._free_milli = free_milli_by_mode(live.state.nodes)
        self._loaded_at = started
        log.info("placement cache loaded %d GPUs on %d nodes in %.0f ms",
                 len(live.gpu_ids), len(live.node_ids), (self._monotonic() - started) * 1000)

    def _note_touched(self, names: Iterable[str]) -> None:
        if self._touched_while_reading is not None:
            self._touched_while_reading.update(names)

    def _reload(self, session: Session, names: set[str]) -> None:
        assert self._live is not None
        self._note_touched(names)
        fresh = placement_state.load(session, node_names=names)
        state = self._live.state
        try:
            for name in names & set(self._live.node_ids):
                self._drop(state, name)
            for node in list(fresh.state.nodes):
                fresh.state.remove_node(node.name)
                state.add_node(node)
                self._free_milli.update(free_milli_by_mode([node]))
                for gpu in node.gpus:
                    self._models[gpu.sharing_mode.value].add(gpu.model)
        except ValueError as exc:  # a GPU moved from a node nobody marked
            log.info("placement cache re-read in full: %s", exc)
            self._load_all(session)
            return
        self._live.gpu_ids.update(fresh.gpu_ids)
        self._live.node_ids.update(fresh.node_ids)
        self._names_by_id.update({i: name for name, i in fresh.node_ids.items()})

    def _drop(self, state: FleetState, name: str) -> None:
        node = state.remove_node(name)
        self._free_milli.subtract(free_milli_by_mode([node]))
        for gpu in node.gpus:
            self._live.gpu_ids.pop(gpu.key, None)
        self._names_by_id.pop(self._live.node_ids.pop(name), None)

