"""Workloads to replay, each as `Task`s in arrival order.

Three formats (docs/whatif.md):

- openb pods (`openb_pod_list_default.csv`): tasks in arrival order, arriving at
  `creation_time` and leaving at `deletion_time` (seconds);
- openb request sequences (`requests/*.jsonl`): the exact sequences of the paper's
  simulator; tasks never leave;
- gpufleet traces (`*.jsonl` with `arrival_s`): any flavour gpufleet places, with optional
  departures.

An openb task with `num_gpu == 1` and `gpu_milli < 1000` is a shared fraction; otherwise
it takes `num_gpu` whole GPUs on one node (0: a host-only task).
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.domain.placement import MILLI, Demand, UnitKind

from .errors import WhatifError
from .sample_trace import SAMPLE_NAME, shipped_sample

OPENB_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec")
OPENB_REQUEST_KEYS = frozenset(OPENB_POD_COLUMNS)
TRACE_KEYS = frozenset({"name", "arrival_s", "departure_s", "kind", "count", "models",
                        "mig_profile", "milli", "cpu_milli", "memory_mib", "same_node",
                        "nvlink", "environments"})
FORMATS = ("auto", "openb-pods", "openb-requests", "trace")


@dataclass(frozen=True)
class Task:
    name: str
    demand: Demand
    arrival_s: float | None = None
    departure_s: float | None = None  # None: never leaves


def _number(value: Any, what: str, where: str, *, minimum: float = 0,
            whole: bool = True) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, str):
            try:
                value = int(value) if whole else float(value)
            except ValueError:
                raise WhatifError(f"{where}: {what} must be a number, not {value!r}") from None
        else:
            raise WhatifError(f"{where}: {what} must be a number, not {value!r}")
    if whole and value != int(value):
        raise WhatifError(f"{where}: {what} must be a whole number, not {value!r}")
    if value < minimum:
        raise WhatifError(f"{where}: {what} must be at least {minimum}, not {value!r}")
    return int(value) if whole else float(value)


def openb_demand(cpu_milli: int, memory_mib: int, num_gpu: int, gpu_milli: int,
                 gpu_spec: str, where: str) -> Demand:
    """An openb task as a demand: a fraction of one GPU, whole GPUs on one node, or host only."""
    models = frozenset(m.strip() for m in gpu_spec.split("|") if m.strip()) or None
    if num_gpu == 1 and 0 < gpu_milli < MILLI:
        return Demand(UnitKind.SHARED, 1, models, milli=gpu_milli, cpu_milli=cpu_milli,
                      memory_mib=memory_mib, same_node=True)
    if num_gpu > 0 and gpu_milli != MILLI:
        raise WhatifError(f"{where}: {num_gpu} GPUs of {gpu_milli} milli each; openb shares "
                          f"only single-GPU tasks")
    return Demand(UnitKind.WHOLE, num_gpu, models, cpu_milli=cpu_milli,
                  memory_mib=memory_mib, same_node=True)


def _openb_task(row: dict, where: str, with_times: bool) -> Task:
    demand = openb_demand(
        _number(row["cpu_milli"], "cpu_milli", where),
        _number(row["memory_mib"], "memory_mib", where),
        _number(row["num_gpu"], "num_gpu", where),
        _number(row["gpu_milli"], "gpu_milli", where),
        str(row.get("gpu_spec") or ""), where)
    name = str(row["name"]).strip()
    if not name:
        raise WhatifError(f"{where}: the task has no name")
    if not with_times:
        return Task(name, demand)
    arrival = _number(row.get("creation_time"), "creation_time", where, whole=False)
    leaving = row.get("deletion_time")
    departure = None if leaving in (None, "") else _number(leaving, "deletion_time", where,
                                                           whole=False)
    return Task(name, demand, arrival, departure)


def load_openb_pods(path: Path) -> list[Task]:
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            header = tuple(reader.fieldnames or ())
            missing = [c for c in (*OPENB_POD_COLUMNS, "creation_time") if c not in header]
            if missing:
                raise WhatifError(f"{path}: not an openb pod list: missing column(s) "
                                  f"{', '.join(missing)}")
            tasks = []
            for line, row in enumerate(reader, start=2):
                if None in row or any(v is None for v in row.values()):
                    raise WhatifError(f"{path}:{line}: wrong number of columns")
                tasks.append(_openb_task(row, f"{path}:{line}", with_times=True))
    except OSError as exc:
        raise WhatifError(f"{path}: cannot read the workload: {exc.strerror}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise WhatifError(f"{path}: not a CSV file: {exc}") from None
    return tasks


def _json_lines(path: Path) -> Iterable[tuple[str, dict]]:
    try:
        with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as handle:
            for line, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                where = f"{path}:{line}"
                try:
                    item = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise WhatifError(f"{where}: not valid JSON: {exc.msg}") from None
                if not isinstance(item, dict):
                    raise WhatifError(f"{where}: expected a JSON object")
                yield where, item
    except OSError as exc:
        raise WhatifError(f"{path}: cannot read the workload: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise WhatifError(f"{path}: not a text file: {exc}") from None


def load_openb_requests(path: Path) -> list[Task]:
    tasks = []
    for where, item in _json_lines(path):
        missing = sorted(OPENB_REQUEST_KEYS - item.keys())
        if missing:
            raise WhatifError(f"{where}: not an openb request: missing {', '.join(missing)}")
        tasks.append(_openb_task(item, where, with_times=False))
    return tasks


def _names(value: Any, what: str, where: str) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and v for v in value):
        raise WhatifError(f"{where}: {what} must be a non-empty list of names or null")
    return frozenset(value)


def trace_task(item: dict, where: str, number: int) -> Task:
    unknown = sorted(item.keys() - TRACE_KEYS)
    if unknown:
        raise WhatifError(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        kind = UnitKind(item.get("kind", "whole"))
    except ValueError:
        raise WhatifError(f"{where}: kind must be whole, mig or shared, "
                          f"not {item.get('kind')!r}") from None
    count = _number(item.get("count", 1), "count", where)
    arrival = _number(item.get("arrival_s", 0), "arrival_s", where, whole=False)
    departure = item.get("departure_s")
    if departure is not None:
        departure = _number(departure, "departure_s", where, whole=False)
        if departure < arrival:
            raise WhatifError(f"{where}: departure_s {departure} is before arrival_s {arrival}")
    milli = _number(item.get("milli", MILLI), "milli", where, minimum=1)
    if kind is UnitKind.SHARED and milli >= MILLI:
        raise WhatifError(f"{where}: a shared unit is 1..999 milli-GPU, not {milli}")
    if kind is UnitKind.MIG and not isinstance(item.get("mig_profile"), str):
        raise WhatifError(f"{where}: a MIG task names its mig_profile (e.g. \"1g.10gb\")")
    if count == 0 and kind is not UnitKind.WHOLE:
        raise WhatifError(f"{where}: only kind whole may have count 0 (a host-only task)")
    for flag in ("same_node", "nvlink"):
        if not isinstance(item.get(flag, False), bool):
            raise WhatifError(f"{where}: {flag} must be true or false")
    demand = Demand(
        kind, count, _names(item.get("models"), "models", where),
        mig_profile=item.get("mig_profile") if kind is UnitKind.MIG else None,
        milli=milli if kind is UnitKind.SHARED else MILLI,
        cpu_milli=_number(item.get("cpu_milli", 0), "cpu_milli", where),
        memory_mib=_number(item.get("memory_mib", 0), "memory_mib", where),
        same_node=item.get("same_node", False), nvlink=item.get("nvlink", False),
        environments=_names(item.get("environments"), "environments", where))
    return Task(str(item.get("name") or f"task-{number}"), demand, arrival, departure)


def load_trace(path: Path) -> list[Task]:
    tasks = []
    for number, (where, item) in enumerate(_json_lines(path), start=1):
        task = trace_task(item, where, number)
        if tasks and task.arrival_s < tasks[-1].arrival_s:
            raise WhatifError(f"{where}: arrival_s {task.arrival_s} is before the previous "
                              f"task's {tasks[-1].arrival_s}; a trace is in arrival order")
        tasks.append(task)
    return tasks


def detect_format(path: Path) -> str:
    """openb-pods for a CSV; for JSON lines, openb-requests if the first object has the
    openb keys, else trace."""
    if path.suffix.lower() == ".csv":
        return "openb-pods"
    for _, item in _json_lines(path):
        return "openb-requests" if item.keys() >= OPENB_REQUEST_KEYS else "trace"
    raise WhatifError(f"{path}: the workload is empty")


def load_workload(path: str | Path, workload_format: str = "auto") -> list[Task]:
    """Tasks in arrival order; WhatifError (one line naming file and line) if malformed.

    `sample` (when no such file exists) is the trace shipped with gpufleet
    (sample_trace.py)."""
    path = Path(path)
    if str(path) == SAMPLE_NAME and not path.exists():
        with shipped_sample() as sample:
            return load_workload(sample, workload_format)
    if workload_format not in FORMATS:
        raise WhatifError(f"unknown workload format {workload_format!r}; "
                          f"known: {', '.join(FORMATS)}")
    if not path.is_file():
        raise WhatifError(f"{path}: no such workload file")
    if workload_format == "auto":
        workload_format = detect_format(path)
    loader = {"openb-pods": load_openb_pods, "openb-requests": load_openb_requests,
              "trace": load_trace}[workload_format]
    tasks = loader(path)
    if not tasks:
        raise WhatifError(f"{path}: the workload has no tasks")
    return tasks
