"""The workload a fragmentation-aware policy protects, and the fragmentation it measures.

Fragmentation follows FGD (Weng et al., USENIX ATC '23): from the point of view of one
kind of task, a node's free GPU capacity is *fragmented* when that task cannot use it —
all of it when the task does not fit on the node at all (GPUs, host CPU / memory, model,
task limit), else the free capacity of the GPUs that cannot hold one of its units. One
extension over FGD: when the node's host CPU or memory would run out before its fitting
GPUs do (it can take k more such tasks but has GPUs for more), the share of the fitting
GPUs those k tasks cannot reach counts as fragmented too — FGD only notices host
resources once not even one task fits. A node's fragmentation is the expectation over the
workload's task kinds, weighted by how often each kind arrives. The default policy places
each demand where it *increases* fragmentation least, and counts that stranding for
whole-GPU kinds only while the fleet runs out of CPU before GPUs (`strand_whole`;
policies.py, `FragmentationScorer.cpu_runs_out_first`), and under the same condition
counts a fraction's stranding against its task slots, not one task per fitting GPU
(`fraction_slots`). A second extension, for that policy
(`waste_when_full`): on a partly used shared GPU, the shared kinds' part — free capacity
times the weight of the shared kinds that cannot use it *now* — is replaced by the waste
expected once the GPU is full (`ExpectedWaste`), for the shared kinds the node's host can
still take.

The workload is learnt online from the demands the placer has seen (no look-ahead), or
seeded with a target distribution. Task kinds are (unit kind, units, fraction or MIG
profile, model list); host CPU and memory of a kind are the mean over its tasks. A kind
of several whole GPUs whose largest task asks for more host than the mean is also
measured at that largest host, for `LARGEST_HOST_SHARE` of its weight (the rest at the
mean): the nodes only the largest such tasks fit on count as broken up when smaller tasks
take them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import mig_plans
from .model import MILLI, Demand, UnitKind

ClassKey = tuple

# Share of a several-whole-GPU kind's weight measured at the largest host CPU / memory
# seen for it (the rest at the mean). On the openb family (BENCHMARKS.md, "…several-GPU
# kinds measured at their largest host") 0.25 lifted the worst sequence against FGD from
# -0.13 to -0.08 points; 0.1, 0.35 and 0.5 each lowered some of the six sequences tried
# by 0.04-0.10 points against the code before it (the figures that section records).
LARGEST_HOST_SHARE = 0.25

# `ExpectedWaste`: the chance, at each shared task that arrives, that a partly used GPU
# gets no more tasks (the fleet fills up, or other GPUs take them) — about 50 more shared
# arrivals for a GPU to fill. 0 (a fitting task always comes in the end) makes the 190
# milli beside an 810-milli task look fillable, which it seldom is (50-160-milli tasks
# are 1-2 % of the openb GPU tasks): 0.14-0.22 points lost on each sequence tried.
# BENCHMARKS.md ("…partly used GPUs at the waste expected once full") has the values
# tried and their figures.
FILL_STOP_CHANCE = 0.02


@dataclass
class TaskClass:
    kind: UnitKind
    count: int
    milli: int
    mig_profile: str | None
    models: frozenset[str] | None
    seen: float = 0.0
    cpu_milli_sum: float = 0.0
    memory_mib_sum: float = 0.0
    cpu_milli_max: int = 0
    memory_mib_max: int = 0
    mig_ids: dict[str, int | None] = field(default_factory=dict)  # model -> profile id

    @property
    def cpu_milli(self) -> float:
        return self.cpu_milli_sum / self.seen if self.seen else 0.0

    @property
    def memory_mib(self) -> float:
        return self.memory_mib_sum / self.seen if self.seen else 0.0

    def mig_id(self, model: str) -> int | None:
        if model not in self.mig_ids:
            geometry = mig_plans.geometry_of(model)
            profile = geometry.profile_named(self.mig_profile) if geometry else None
            self.mig_ids[model] = profile.profile_id if profile else None
        return self.mig_ids[model]


def class_key(demand: Demand) -> ClassKey:
    milli = demand.milli if demand.kind is UnitKind.SHARED else MILLI
    return (demand.kind.value, demand.count, milli, demand.mig_profile, demand.models)


class Workload:
    """Task kinds and their frequencies; `observe` learns, `weights` are refreshed lazily.

    Weights are recomputed when the number of tasks seen has grown by `refresh_ratio`
    (or a new kind appears), so scores stay comparable between refreshes and the caches
    that depend on them live long enough to pay off.
    """

    def __init__(self, demands: Iterable[Demand] = (), refresh_ratio: float = 1.02):
        self.classes: dict[ClassKey, TaskClass] = {}
        self.refresh_ratio = refresh_ratio
        self.generation = 0  # bumps whenever `classes` gains a kind
        self.weights_generation = 0  # bumps whenever weights change
        self._seen = 0.0
        self._seen_at_refresh = 0.0
        # the measured entries: a GPU task kind may appear twice (mean and largest host)
        self.gpu_classes: list[TaskClass] = []
        self.weights: list[float] = []
        self.hosts: list[tuple[float, float]] = []  # (cpu milli, memory MiB) per entry
        self.cpu_per_gpu_milli = 0.0  # host CPU milli asked per milli-GPU asked, all tasks
        for demand in demands:
            self.observe(demand)

    def observe(self, demand: Demand, weight: float = 1.0) -> None:
        key = class_key(demand)
        task = self.classes.get(key)
        if task is None:
            milli = demand.milli if demand.kind is UnitKind.SHARED else MILLI
            task = self.classes[key] = TaskClass(demand.kind, demand.count, milli,
                                                 demand.mig_profile, demand.models)
            self.generation += 1
        task.seen += weight
        task.cpu_milli_sum += demand.cpu_milli * weight
        task.memory_mib_sum += demand.memory_mib * weight
        task.cpu_milli_max = max(task.cpu_milli_max, demand.cpu_milli)
        task.memory_mib_max = max(task.memory_mib_max, demand.memory_mib)
        self._seen += weight
        if (task.seen == weight or self._seen >= self._seen_at_refresh * self.refresh_ratio
                or self._seen - self._seen_at_refresh >= 64):
            self._refresh()

    def _refresh(self) -> None:
        self._seen_at_refresh = self._seen
        total = sum(c.seen for c in self.classes.values()) or 1.0
        gpu_milli = sum(c.seen * c.count * c.milli for c in self.classes.values())
        self.cpu_per_gpu_milli = (sum(c.cpu_milli_sum for c in self.classes.values())
                                  / gpu_milli if gpu_milli else 0.0)
        self.gpu_classes, self.weights, self.hosts = [], [], []
        for task in self.classes.values():
            if task.count == 0:
                continue
            weight, host = task.seen / total, (task.cpu_milli, task.memory_mib)
            largest = (task.cpu_milli_max, task.memory_mib_max)
            if (task.kind is UnitKind.WHOLE and task.count > 1
                    and (largest[0] > host[0] or largest[1] > host[1])):
                # the nodes only its largest tasks fit on are worth keeping whole for them
                self._add(task, weight * (1 - LARGEST_HOST_SHARE), host)
                self._add(task, weight * LARGEST_HOST_SHARE, largest)
            else:
                self._add(task, weight, host)
        self.weights_generation += 1

    def _add(self, task: TaskClass, weight: float, host: tuple[float, float]) -> None:
        self.gpu_classes.append(task)
        self.weights.append(weight)
        self.hosts.append(host)


class ExpectedWaste:
    """Free milli-GPU a partly used shared GPU is expected to keep once nothing more fits.

    Shared tasks arrive drawn from the workload's shared kinds (those allowed on the
    model) by frequency; one that fits the GPU's f free milli takes m of it; before each
    arrival the GPU gets no more tasks with chance h (`FILL_STOP_CHANCE`). With s the
    share of arrivals that fit f, W(f) = (h f + (1 - h) s E[W(f - m) | fits]) /
    (h + (1 - h) s), and W(f) = f when no kind fits. FGD counts a GPU's free part as lost
    for each kind that cannot use it *now*, so 330 free beside a 670-milli task and 190
    beside an 810-milli task look almost the same (few kinds fit either); once full, the
    330 is likely to have taken a 250-330-milli task, the 190 — which only rare 50-160-milli
    tasks fit — to have lost most of itself. Computed lazily per model and free milli;
    cleared when the weights change.
    """

    def __init__(self, workload: Workload):
        self.workload = workload
        self._kinds: dict[str, list[tuple[int, float]]] = {}  # model -> (milli, weight)
        self._waste: dict[tuple[str, int], float] = {}
        # the meter's corrections by (pictures, free CPU, free memory, open)
        self.corrections: dict[tuple, float] = {}

    def clear(self) -> None:
        self._kinds.clear()
        self._waste.clear()
        self.corrections.clear()

    def _shared_kinds(self, model: str) -> list[tuple[int, float]]:
        found = self._kinds.get(model)
        if found is None:
            by_milli: dict[int, float] = {}
            for task, weight in zip(self.workload.gpu_classes, self.workload.weights,
                                    strict=True):
                if task.kind is UnitKind.SHARED and (task.models is None
                                                     or model in task.models):
                    by_milli[task.milli] = by_milli.get(task.milli, 0.0) + weight
            found = self._kinds[model] = sorted(by_milli.items())
        return found

    def shared_weight(self, model: str) -> float:
        """The workload's weight of the shared kinds allowed on `model`."""
        return sum(weight for _, weight in self._shared_kinds(model))

    def of(self, model: str, free_milli: int) -> float:
        memo = self._waste
        found = memo.get((model, free_milli))
        if found is not None:
            return found
        kinds = self._shared_kinds(model)
        pending = [free_milli]  # explicit stack: small kinds would recurse deeply
        while pending:
            free = pending[-1]
            if (model, free) in memo:
                pending.pop()
                continue
            missing = [free - milli for milli, _ in kinds
                       if milli <= free and (model, free - milli) not in memo]
            if missing:
                pending.extend(missing)
                continue
            fitting = expected = 0.0
            for milli, weight in kinds:
                if milli > free:
                    break
                fitting += weight
                expected += weight * memo[(model, free - milli)]
            if fitting:
                stop, share = FILL_STOP_CHANCE, fitting / self.shared_weight(model)
                memo[(model, free)] = ((stop * free + (1 - stop) * share * expected / fitting)
                                       / (stop + (1 - stop) * share))
            else:
                memo[(model, free)] = float(free)
            pending.pop()
        return memo[(model, free_milli)]


# One GPU for the meter: (model, sharing mode, usable, free milli, MIG layout key, MIG
# layout fixed).
Picture = tuple[str, str, bool, int, mig_plans.LayoutKey, bool]


class FragmentationMeter:
    """Expected fragmentation of a node, in milli-GPU, against a `Workload`.

    The GPU part (per task kind: how many units fit, and the free capacity of GPUs that
    cannot hold one) depends only on the node's GPU picture and is cached by it; the
    fragmentation per task kind (GPU part and host CPU, memory, task limit) is cached
    while the entries and their host demands (the mean, or the largest seen for a share of
    a several-GPU kind) stay the same, and the weighted sum while the weights do.
    """

    def __init__(self, workload: Workload, whole_gpus_from_shared: bool = False,
                 waste_when_full: bool = False):
        self.workload = workload
        self.whole_from_shared = whole_gpus_from_shared
        # partly used shared GPUs measured by the waste expected once they are full
        # (`ExpectedWaste`), not by what fits them now
        self.waste = ExpectedWaste(workload) if waste_when_full else None
        self._gpu_memo: dict[tuple, tuple] = {}
        self._gpu_fits: dict[Picture, tuple[bool, ...]] = {}  # one GPU: fits per task kind
        self._per_kind: dict[tuple, tuple[float, ...]] = {}
        self._memo: dict[tuple, float] = {}
        self._classes_seen = -1
        self._hosts_seen: list[tuple[float, float]] = []
        self._weights_seen = -1

    def node(self, pictures: tuple[Picture, ...], cpu_milli: int | None,
             memory_mib: int | None, open_: bool, *, key: int | None = None,
             strand_whole: bool = True, fraction_slots: bool = False) -> float:
        """`key`: a small stand-in for `pictures` in the caches (a `FleetState.ids` id),
        the same for the same pictures; the pictures themselves when None.
        `strand_whole`: count the host stranding of whole-GPU kinds too (the default
        policy does only while the fleet runs out of CPU first; the report always does).
        `fraction_slots`: count a one-unit fraction's host stranding against the tasks its
        fitting GPUs hold (a fresh 8-GPU node holds 16 470-milli tasks), not one per GPU
        (the default policy does while the fleet runs out of CPU first; the report never)."""
        workload = self.workload
        if workload.weights_generation != self._weights_seen:
            self._weights_seen = workload.weights_generation
            self._memo.clear()
            if len(workload.gpu_classes) != self._classes_seen:
                self._classes_seen = len(workload.gpu_classes)
                self._gpu_memo.clear()
                self._gpu_fits.clear()
                self._per_kind.clear()
            elif workload.hosts != self._hosts_seen:
                self._per_kind.clear()
            self._hosts_seen = workload.hosts
            if self.waste is not None:
                self.waste.clear()
        short = pictures if key is None else key
        memo_key = (short, cpu_milli, memory_mib, open_, strand_whole, fraction_slots)
        found = self._memo.get(memo_key)
        if found is not None:
            return found
        per_kind = self._per_kind.get(memo_key)
        if per_kind is None:
            gpu_part = self._gpu_memo.get(short)
            if gpu_part is None:
                gpu_part = self._gpu_memo[short] = self._gpu_part(pictures)
            per_kind = self._fragmented_per_kind(gpu_part, cpu_milli, memory_mib, open_,
                                                 strand_whole, fraction_slots)
            if len(self._per_kind) > 200_000:
                self._per_kind.clear()
            self._per_kind[memo_key] = per_kind
        value = 0.0
        for weight, fragmented in zip(workload.weights, per_kind, strict=True):
            value += weight * fragmented
        if self.waste is not None:
            value += self._waste_correction(pictures, memo_key, cpu_milli, memory_mib, open_)
        if len(self._memo) > 200_000:
            self._memo.clear()
        self._memo[memo_key] = value
        return value

    def _waste_correction(self, pictures: tuple[Picture, ...], memo_key: tuple,
                          cpu_milli: int | None, memory_mib: int | None,
                          open_: bool) -> float:
        """For each partly used shared GPU, the shared kinds' part of its fragmentation —
        its free capacity times the weight of the shared kinds that cannot use it now —
        replaced by the waste expected once it is full times the weight of the shared
        kinds (the same when none fits). Only the shared kinds the node's host CPU,
        memory and task room still take count: for the others the GPU stays lost, as
        FGD says. The whole-GPU kinds' part stays too: the GPU is lost to them either way.
        W itself is over all the model's shared kinds (one table per model, not per host).
        """
        waste = self.waste
        found = waste.corrections.get(memo_key)
        if found is not None:
            return found
        workload = self.workload
        classes = workload.gpu_classes
        hosted = [open_ and task.kind is UnitKind.SHARED
                  and (cpu_milli is None or cpu_milli >= cpu)
                  and (memory_mib is None or memory_mib >= memory)
                  for task, (cpu, memory) in zip(classes, workload.hosts, strict=True)]
        correction = 0.0
        if any(hosted):
            weights = workload.weights
            for gpu in pictures:
                model, mode, usable, free = gpu[0], gpu[1], gpu[2], gpu[3]
                if not (usable and mode == "shared" and 0 < free < MILLI):
                    continue
                fits = self._gpu_fits.get(gpu)
                if fits is None:
                    fits = self._gpu_fits[gpu] = tuple(self._fits(task, gpu)
                                                       for task in classes)
                share = unfit = 0.0
                for weight, fit, task, host_ok in zip(weights, fits, classes, hosted,
                                                      strict=True):
                    if host_ok and (task.models is None or model in task.models):
                        share += weight
                        if not fit:
                            unfit += weight
                correction += share * waste.of(model, free) - free * unfit
        if len(waste.corrections) > 200_000:
            waste.corrections.clear()
        waste.corrections[memo_key] = correction
        return correction

    def _fragmented_per_kind(self, gpu_part: tuple[int, tuple], cpu_milli: int | None,
                             memory_mib: int | None, open_: bool,
                             strand_whole: bool = True,
                             fraction_slots: bool = False) -> tuple[float, ...]:
        """Free milli-GPU each task kind cannot use on the node; without `strand_whole`
        a whole-GPU kind that fits counts only the GPUs too small for it, as FGD does."""
        total, fits = gpu_part
        workload = self.workload
        found: list[float] = []
        for (n_fit, frag, slots), task, (cpu, memory) in zip(
                fits, workload.gpu_classes, workload.hosts, strict=True):
            if not (open_ and n_fit >= task.count and (cpu_milli is None or cpu_milli >= cpu)
                    and (memory_mib is None or memory_mib >= memory)):
                found.append(total)
                continue
            if not strand_whole and task.kind is UnitKind.WHOLE:
                found.append(frag)
                continue
            # How many such tasks the node can still take: host CPU and memory may run out
            # before its GPUs do, and the GPUs they leave behind are stranded. With
            # `fraction_slots` a one-unit fraction's room is its task slots, else one task
            # per fitting GPU.
            room = (slots if fraction_slots and task.kind is UnitKind.SHARED
                    and task.count == 1 else n_fit)
            tasks = room // task.count
            if cpu_milli is not None and cpu > 0:
                tasks = min(tasks, int(cpu_milli // cpu))
            if memory_mib is not None and memory > 0:
                tasks = min(tasks, int(memory_mib // memory))
            stranded = max(0.0, 1.0 - tasks * task.count / room)
            found.append(frag + stranded * (total - frag))
        return tuple(found)

    def _gpu_part(self, pictures: tuple[Picture, ...]) -> tuple[int, tuple]:
        """(free milli-GPU, per task kind (GPUs that can hold one unit, free milli-GPU of
        the others, task slots: units of the kind its fitting GPUs hold — one per GPU for
        whole GPUs and MIG, free // milli for a fraction)); GPUs with nothing free count
        for none."""
        total = 0
        copies: dict[Picture, int] = {}  # nodes often have several GPUs alike
        for gpu in pictures:
            total += gpu[3]
            if gpu[2] and gpu[3]:  # usable, something free
                copies[gpu] = copies.get(gpu, 0) + 1
        classes = self.workload.gpu_classes
        n_fit = [0] * len(classes)
        frag = [0] * len(classes)
        slots = [0] * len(classes)
        for gpu, count in copies.items():
            fits = self._gpu_fits.get(gpu)
            if fits is None:
                if len(self._gpu_fits) > 100_000:
                    self._gpu_fits.clear()
                fits = self._gpu_fits[gpu] = tuple(self._fits(task, gpu) for task in classes)
            free = gpu[3]
            for number, fit in enumerate(fits):
                if fit:
                    n_fit[number] += count
                    task = classes[number]
                    slots[number] += (count * (free // task.milli)
                                      if task.kind is UnitKind.SHARED else count)
                else:
                    frag[number] += count * free
        if len(self._gpu_memo) > 200_000:
            self._gpu_memo.clear()
        return total, tuple(zip(n_fit, frag, slots, strict=True))

    def _fits(self, task: TaskClass, gpu: Picture) -> bool:
        """Whether one unit of `task` fits on a usable GPU with something free."""
        model, mode, _, free, layout, fixed = gpu
        if task.models is not None and model not in task.models:
            return False
        if task.kind is UnitKind.WHOLE:
            return free == MILLI and (mode == "exclusive"
                                      or (mode == "shared" and self.whole_from_shared))
        if task.kind is UnitKind.SHARED:
            return mode == "shared" and free >= task.milli
        profile_id = task.mig_id(model)
        return (mode == "mig" and profile_id is not None
                and profile_id in mig_plans.hostable(model, layout, fixed))
