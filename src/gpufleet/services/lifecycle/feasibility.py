"""Refuse at creation what no state of the fleet could ever grant, in the CLI's words.

A request that asks for a model the fleet has none of, an environment that does not exist,
more units than the fleet holds, a same-node group larger than any node, or more host CPU or
memory than any node has would otherwise be accepted and wait forever. These checks read the
fleet's cached shape (`services/inventory/fleet_shape.py`), never every GPU; the caller reads
it again before a refusal stands. Messages name the limit and what exists, with the flags a
person typed (`--gpus`, `--count`, `--cpu … cores`, `--memory … GiB`), since the CLI prints
them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.gpu_models import catalogue
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.requests import FlavourKind
from gpufleet.services.inventory.fleet_shape import ShapeCell, ShapeKey
from gpufleet.services.lifecycle.granting import has_mig_profile
from gpufleet.services.lifecycle.placement_state import MODE_OF_KIND
from gpufleet.store.tables import Environment
from gpufleet.wire.requests import RequestCreate

GIB = 1024**3


@dataclass
class ModelCapacity:
    """One model's GPUs in the request's sharing mode and environment, over all nodes."""

    gpus: int = 0
    largest_node_gpus: int = 0
    largest_node_cpu_cores: int = 0
    largest_node_memory_bytes: int = 0

    def add(self, cell: ShapeCell) -> None:
        self.gpus += cell.gpus
        self.largest_node_gpus = max(self.largest_node_gpus, cell.largest_node_gpus)
        self.largest_node_cpu_cores = max(self.largest_node_cpu_cores,
                                          cell.largest_node_cpu_cores)
        self.largest_node_memory_bytes = max(self.largest_node_memory_bytes,
                                             cell.largest_node_memory_bytes)


def check_environment(session: Session, body: RequestCreate) -> None:
    """An environment that does not exist can never be placed in."""
    if body.environment is None:
        return
    names = list(session.scalars(select(Environment.name).order_by(Environment.name)))
    if body.environment not in names:
        raise InvalidInput(
            f"--env {body.environment}: no such environment; the fleet has "
            f"{', '.join(names) or 'none'}", code="unknown_environment",
            details={"environment": body.environment, "environments": names})


def check_feasible(body: RequestCreate, cells: dict[ShapeKey, ShapeCell]) -> None:
    """Refuse what the fleet's shape (`cells`) could never grant."""
    _check_catalogue(body)
    by_model = _capacity_by_model(body, cells)
    candidates = _candidates(body, by_model)
    units = {m: _units(body, m, by_model[m].gpus) for m in candidates}
    if body.count > sum(units.values()):
        raise InvalidInput(
            f"{_asked(body)}: the fleet has {_listing(body, units)}; largest node "
            f"{max(_units(body, m, by_model[m].largest_node_gpus) for m in candidates)}",
            code="not_enough_in_fleet",
            details={"count": body.count, "units_by_model": units})
    if body.same_node or body.nvlink:
        _check_one_node(body, {m: _units(body, m, by_model[m].largest_node_gpus)
                               for m in candidates})
    _check_host(body, [by_model[m] for m in candidates])


def _check_catalogue(body: RequestCreate) -> None:
    for key in body.models or ():
        found = catalogue_model(key)
        if found is None:
            raise InvalidInput(f"unknown GPU model '{key}'", code="unknown_model",
                               details={"model": key})
        if found.key != key:
            raise InvalidInput(f"GPU model '{key}' is spelled '{found.key}'",
                               code="unknown_model", details={"model": key})
        if body.kind is FlavourKind.MIG and found.mig is None:
            raise InvalidInput(f"{key} cannot do MIG", code="mig_model_unknown",
                               details={"model": key})
    if body.kind is FlavourKind.MIG and not any(
            has_mig_profile(key, body.mig_profile) for key in body.models or catalogue()):
        raise InvalidInput(f"--mig {body.mig_profile}: no GPU model has this MIG profile",
                           code="unknown_mig_profile",
                           details={"mig_profile": body.mig_profile})


def _capacity_by_model(body: RequestCreate, cells: dict[ShapeKey, ShapeCell]
                       ) -> dict[str, ModelCapacity]:
    mode = MODE_OF_KIND[body.kind].value
    found: dict[str, ModelCapacity] = {}
    for (environment, cell_mode, model_key), cell in cells.items():
        if cell_mode == mode and body.environment in (None, environment):
            found.setdefault(model_key, ModelCapacity()).add(cell)
    return found


def _candidates(body: RequestCreate, by_model: dict[str, ModelCapacity]) -> list[str]:
    """The fleet's models the request accepts; refused when there are none."""
    mode = MODE_OF_KIND[body.kind].value
    where = f" in environment {body.environment}" if body.environment else ""
    present = sorted(by_model)
    if not present:
        raise InvalidInput(f"the fleet has no usable GPUs in {mode} mode{where}",
                           code="no_such_gpus",
                           details={"sharing_mode": mode, "environment": body.environment})
    wanted = [m for m in present if not body.models or m in body.models]
    if not wanted:
        raise InvalidInput(
            f"--model {' --model '.join(body.models)}: the fleet has none{where} in {mode} "
            f"mode; it has {', '.join(present)}", code="model_not_in_fleet",
            details={"models": body.models, "fleet_models": present, "sharing_mode": mode})
    if body.kind is FlavourKind.MIG:
        knowing = [m for m in wanted if has_mig_profile(m, body.mig_profile)]
        if not knowing:
            raise InvalidInput(
                f"--mig {body.mig_profile}: no MIG GPU in the fleet{where} has this profile "
                f"(its MIG models: {', '.join(wanted)})", code="unknown_mig_profile",
                details={"mig_profile": body.mig_profile, "fleet_models": wanted})
        return knowing
    return wanted


def _units(body: RequestCreate, model_key: str, gpus: int) -> int:
    """Units of the request's kind that `gpus` GPUs of a model hold. A request's fractions
    go on distinct GPUs, so a shared GPU holds one of them."""
    if body.kind is FlavourKind.MIG:
        profile = catalogue_model(model_key).mig.profile_named(body.mig_profile)
        return gpus * profile.max_instances
    return gpus


def _asked(body: RequestCreate, *, topology: bool = False) -> str:
    """The request as the CLI spelt it: `--gpus 9`, `--mig 1g.10gb --count 9`."""
    same_node = " --same-node" if topology else ""
    if body.kind is FlavourKind.MIG:
        return f"--mig {body.mig_profile} --count {body.count}{same_node}"
    if body.kind is FlavourKind.SHARED:
        return f"--fraction {body.fraction:g} --count {body.count}{same_node}"
    return f"--gpus {body.count}{same_node}"


def _listing(body: RequestCreate, units: dict[str, int]) -> str:
    where = f" in environment {body.environment}" if body.environment else ""
    what = {FlavourKind.MIG: f" ({body.mig_profile} instances)",
            FlavourKind.SHARED: " (shared GPUs; one fraction each)",
            FlavourKind.WHOLE: ""}[body.kind]
    return ", ".join(f"{n} {m}" for m, n in sorted(units.items())) + what + where


def _check_one_node(body: RequestCreate, per_node: dict[str, int]) -> None:
    most = max(per_node.values())
    if body.count > most:
        best = max(per_node, key=per_node.get)
        raise InvalidInput(
            f"{_asked(body, topology=True)}: the largest node has {most} {best}"
            + (f" ({body.mig_profile} instances)" if body.kind is FlavourKind.MIG else ""),
            code="too_many_for_one_node",
            details={"count": body.count, "largest_node": most})


def _check_host(body: RequestCreate, capacities: list[ModelCapacity]) -> None:
    """Host CPU and memory beside each unit: one unit must fit a node, and with
    `--same-node` all of them must fit the same node."""
    units_on_a_node = body.count if body.same_node or body.nvlink else 1
    _check_host_resource("--cpu", "cores", "host_cpu_exceeded", body.cpu_cores_per_unit,
                         units_on_a_node, max(c.largest_node_cpu_cores for c in capacities))
    _check_host_resource("--memory", "GiB", "host_memory_exceeded", body.memory_gib_per_unit,
                         units_on_a_node,
                         max(c.largest_node_memory_bytes for c in capacities) / GIB)


def _check_host_resource(flag: str, unit: str, code: str, per_unit: float,
                         units_on_a_node: int, largest_node: float) -> None:
    if per_unit * units_on_a_node <= largest_node:
        return
    together = f" × {units_on_a_node} units on one node" if units_on_a_node > 1 else ""
    raise InvalidInput(
        f"{flag} {per_unit:g} {unit} per unit{together}: the largest node has "
        f"{largest_node:g} {unit}", code=code,
        details={"per_unit": per_unit, "units_on_one_node": units_on_a_node,
                 "largest_node": largest_node})
