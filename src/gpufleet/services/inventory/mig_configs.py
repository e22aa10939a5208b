"""MIG layouts exported as an NVIDIA mig-parted config file, for operators (docs/design.md,
"Placement").

Each GPU's desired layout is its pending MIG plan where one exists, else the instances its
node reports. A node's GPUs, grouped by identical layout and listed by GPU index, form the
node's config; nodes with the same layout share one config, named after its content
(`gpufleet-<hash>`), so a re-export keeps the names that node labels point at.

mig-parted creates instances by profile and count and lets the driver choose where each
starts, so the file pins no placements: it is an export for operators, never the plan. The
gpufleet agent applies plans itself, with explicit placements. Nodes without a MIG GPU are
left out; mig-parted rejects an empty `mig-configs` map, so an empty selection is a file
with only `version: v1` and a comment saying why.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import NotFound
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.inventory import GpuHealth, NodeStatus, SharingMode
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.registration import MISSING_REASON
from gpufleet.services.lookup import one_where
from gpufleet.store.tables import Environment, Gpu, MigInstance, MigPlan, Node
from gpufleet.wire.base import View

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
CONFIG_PREFIX = "gpufleet-"
NODES_NAMED_PER_CONFIG = 20
CAVEAT = ("mig-parted does not pin placements: it creates instances by profile and count and "
          "the driver chooses where each starts, so applying this config may give a different "
          "placement than gpufleet planned. gpufleet learns the node's actual instances when "
          "its agent registers again, but a binding names its instance by placement (GPU, "
          "profile, start): one whose placement differs stays unmatched (CUDA_VISIBLE_DEVICES "
          "shows it as pending:…) and the GPU's MIG plan stays pending until the layout is "
          "re-created with exact placements, which the gpufleet agent does itself.")
# mig-parted's profile grammar: [<c>c.]<g>g.<mem>gb[+me|-me|+gfx|+me.all…]
_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[+-][a-z][a-z.,]*)?$")


# --- the JSON form -------------------------------------------------------------------------
class MigPlacementView(View):
    profile: str
    placement_start: int | None


class DeviceMigConfig(View):
    index: int
    gpu_uuid: str
    model: str
    mig_enabled: bool
    source: Literal["plan", "reported"] = "reported"
    mig_devices: dict[str, int]
    placements: list[MigPlacementView] = []


class NodeMigConfig(View):
    node: str
    environment: str
    config: str
    node_label: str
    pending_plan: bool
    devices: list[DeviceMigConfig]


class MigConfigExport(View):
    """The mig-parted config (`mig_parted`, and as a file `config_yaml`), and which config
    each node selects. `pins_placements` is always false: see `caveat`."""

    generated_at: datetime
    node: str | None
    environment: str | None
    pins_placements: Literal[False] = False
    caveat: str = CAVEAT
    mig_parted: dict[str, Any]
    nodes: list[NodeMigConfig]
    notes: list[str]
    config_yaml: str


# --- reading the fleet -----------------------------------------------------------------------
@dataclass
class _NodeRows:
    name: str
    environment: str
    gpus: list = field(default_factory=list)


def _selection(session: Session, node: str | None, environment: str | None,
               notes: list[str]) -> list:
    """The conditions on `Node` that select the export's nodes; 404 for a name not found."""
    conditions = [Node.status != NodeStatus.RETIRED.value]
    env = None
    if environment is not None:
        env = one_where(session, Environment, Environment.name == environment, "environment",
                        environment)
        conditions.append(Node.environment_id == env.id)
    if node is not None:
        found = one_where(session, Node, Node.name == node, "node", node)
        if env is not None and found.environment_id != env.id:
            raise NotFound(f"node '{node}' is not in environment '{environment}'",
                           code="node_not_found", details={"node": node,
                                                           "environment": environment})
        if found.status == NodeStatus.RETIRED.value:
            notes.append(f"node {node} is retired: retired nodes are left out")
        conditions.append(Node.id == found.id)
    return conditions


_GPU_COLUMNS = (Gpu.id, Gpu.node_id, Gpu.index, Gpu.uuid, Gpu.model, Gpu.model_known,
                Gpu.sharing_mode, Gpu.health, Gpu.health_reason, Gpu.mig_instances_unread)


def _read(session: Session, conditions: list) -> tuple[dict[int, _NodeRows], dict, dict]:
    """Nodes with their GPUs, reported instances by GPU id, plan layouts by GPU id — three
    queries whatever the fleet's size."""
    nodes: dict[int, _NodeRows] = {}
    for gpu in session.execute(
            select(*_GPU_COLUMNS, Node.name.label("node_name"),
                   Environment.name.label("environment_name"))
            .join(Node, Node.id == Gpu.node_id)
            .join(Environment, Environment.id == Node.environment_id)
            .where(*conditions).order_by(Node.name, Gpu.index)):
        if gpu.health == GpuHealth.SUSPECT.value and gpu.health_reason == MISSING_REASON:
            continue  # gone from its node's inventory: not a device mig-parted would see
        nodes.setdefault(gpu.node_id, _NodeRows(gpu.node_name, gpu.environment_name)
                         ).gpus.append(gpu)
    instances: dict[int, list] = defaultdict(list)
    for row in session.execute(
            select(MigInstance.gpu_id, MigInstance.profile_id, MigInstance.placement_start,
                   MigInstance.profile_name).join(Gpu, Gpu.id == MigInstance.gpu_id)
            .join(Node, Node.id == Gpu.node_id).where(*conditions)):
        instances[row.gpu_id].append(row)
    plans = dict(session.execute(
        select(MigPlan.gpu_id, MigPlan.layout).join(Gpu, Gpu.id == MigPlan.gpu_id)
        .join(Node, Node.id == Gpu.node_id).where(*conditions)).all())
    return nodes, instances, plans


# --- layouts -------------------------------------------------------------------------------
class _Unnamed(Exception):
    """A GPU whose layout cannot be written faithfully: a profile with no name in
    mig-parted's grammar, or instances its node could not read."""


def _check_read(gpu: Any, reported: list, plan: list | None) -> None:
    """Refuse a layout that may lack instances the GPU has: mig-parted applies a config
    as the whole layout, so an instance missing from it would be destroyed, work and all.
    Unread instances are the node's word for it; a MIG GPU of a model gpufleet does not
    know that reports no instance at all is what a source that could not read them sends
    (an older dcgm-exporter agent on a page without `modelName`)."""
    if plan is not None:
        return
    if gpu.mig_instances_unread:
        raise _Unnamed(f"GPU {gpu.index} ({gpu.uuid}): {gpu.mig_instances_unread} MIG "
                       "instance(s) its node could not read; exporting its layout would "
                       "destroy them")
    if not gpu.model_known and not reported and gpu.sharing_mode == SharingMode.MIG.value:
        raise _Unnamed(f"GPU {gpu.index} ({gpu.uuid}): model {gpu.model!r} is not known, so "
                       "its MIG instances could not be read; exporting an empty layout "
                       "would destroy any it has")


def _profile_name(gpu: Any, profile_id: int, reported: str | None) -> str:
    known = catalogue_model(gpu.model) if gpu.model_known else None
    profile = known.mig.profile(profile_id) if known and known.mig else None
    name = profile.name if profile else (reported or "").removeprefix("MIG ").strip()
    if not _PROFILE.match(name):
        raise _Unnamed(f"GPU {gpu.index} ({gpu.model}): MIG profile id {profile_id} has no "
                       f"mig-parted name{f' (reported {reported!r})' if reported else ''}")
    return name


def _profile_order(name: str) -> tuple:
    c, g, gb = _PROFILE.match(name).groups()
    return int(g), int(c or g), int(gb), name


def _device(gpu: Any, reported: list, plan: list[list[int]] | None) -> DeviceMigConfig:
    _check_read(gpu, reported, plan)
    if plan is not None:
        wanted = [(_profile_name(gpu, p, None), s) for p, s in plan]
    else:
        wanted = [(_profile_name(gpu, r.profile_id, r.profile_name), r.placement_start)
                  for r in reported]
    enabled = plan is not None or bool(reported) or gpu.sharing_mode == SharingMode.MIG.value
    counts = Counter(name for name, _ in wanted)
    return DeviceMigConfig(
        index=gpu.index, gpu_uuid=gpu.uuid, model=gpu.model, mig_enabled=enabled,
        source="plan" if plan is not None else "reported",
        mig_devices={n: counts[n] for n in sorted(counts, key=_profile_order)},
        placements=[MigPlacementView(profile=n, placement_start=s)
                    for n, s in sorted(wanted, key=lambda w: (w[1] is None, w[1] or 0))])


def _specs(devices: list[DeviceMigConfig]) -> list[dict[str, Any]]:
    """mig-parted's MigConfigSpec list: devices with the same layout grouped, by index."""
    groups: dict[str, dict[str, Any]] = {}
    for device in sorted(devices, key=lambda d: d.index):
        key = json.dumps([device.mig_enabled, device.mig_devices])
        spec = groups.setdefault(key, {"devices": [], "mig-enabled": device.mig_enabled})
        spec["devices"].append(device.index)
        if device.mig_enabled:
            spec["mig-devices"] = dict(device.mig_devices)
    return list(groups.values())


def config_name(specs: list[dict[str, Any]]) -> str:
    """The same layout always gets the same name, whichever node or export it came from."""
    digest = hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()
    return CONFIG_PREFIX + digest[:10]


# --- the use case ----------------------------------------------------------------------------
def export(session: Session, principal: Principal, *, node: str | None,
           environment: str | None, now: datetime, generator: str) -> MigConfigExport:
    """The mig-parted config for the selected nodes (every node that is not retired)."""
    principal.require(Action.READ_INVENTORY)
    notes: list[str] = []
    nodes, instances, plans = _read(session, _selection(session, node, environment, notes))
    configs: dict[str, list[dict[str, Any]]] = {}
    exported: list[NodeMigConfig] = []
    left_out = 0
    for rows in sorted(nodes.values(), key=lambda r: r.name):
        if not any(g.sharing_mode == SharingMode.MIG.value or instances.get(g.id)
                   or g.id in plans for g in rows.gpus):
            continue
        indexes = [g.index for g in rows.gpus]
        if len(set(indexes)) != len(indexes):
            notes.append(f"node {rows.name} left out: two GPUs report the same index")
            left_out += 1
            continue
        try:
            devices = [_device(g, instances.get(g.id, []), plans.get(g.id)) for g in rows.gpus]
        except _Unnamed as unnamed:
            notes.append(f"node {rows.name} left out: {unnamed}")
            left_out += 1
            continue
        specs = _specs(devices)
        name = config_name(specs)
        configs[name] = specs
        exported.append(NodeMigConfig(
            node=rows.name, environment=rows.environment, config=name,
            node_label=f"{MIG_CONFIG_LABEL}={name}", devices=devices,
            pending_plan=any(d.source == "plan" for d in devices)))
    if left_out and not exported:
        notes.append("no node in this selection could be exported: nothing for mig-parted "
                     "to do")
    elif not exported:
        notes.append("no node in this selection has a MIG GPU: nothing for mig-parted to do")
    spec = {"version": "v1", **({"mig-configs": configs} if configs else {})}
    return MigConfigExport(
        generated_at=now, node=node, environment=environment, mig_parted=spec,
        nodes=exported, notes=notes,
        config_yaml=render_yaml(spec, exported, notes, now=now, generator=generator,
                                node=node, environment=environment))


# --- the file --------------------------------------------------------------------------------
class _Flow(list):
    """A list mig-parted's own examples write inline: `devices: [0, 1]`."""


class _Quoted(str):
    """A profile name, quoted as in mig-parted's examples: `"1g.10gb": 2`."""


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)  # indent lists under their key


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence(
    "tag:yaml.org,2002:seq", v, flow_style=True))
_Dumper.add_representer(_Quoted, lambda d, v: d.represent_scalar(
    "tag:yaml.org,2002:str", v, style='"'))


def _styled(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**s, "devices": _Flow(s["devices"]),
             **({"mig-devices": {_Quoted(k): v for k, v in s["mig-devices"].items()}}
                if "mig-devices" in s else {})} for s in specs]


def _comment(text: str, indent: str = "") -> list[str]:
    return [f"{indent}# {line}".rstrip() for line in text.splitlines()]


def _header(now: datetime, generator: str, node: str | None,
            environment: str | None) -> str:
    scope = ", ".join(f"{k} {v}" for k, v in (("environment", environment), ("node", node))
                      if v) or "every node that is not retired"
    return f"""\
NVIDIA mig-parted config, generated by {generator} at {now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}
Selection: {scope}.

NOT PINNING PLACEMENTS: mig-parted creates MIG instances by profile and count and lets
the driver choose where each starts (which memory slices it takes). Applying this file may
give a different placement than gpufleet planned. gpufleet learns the node's actual
instances when its agent registers again, but a binding names its instance by placement
(GPU, profile, start): one whose placement differs stays unmatched (CUDA_VISIBLE_DEVICES
shows it as pending:...) and the GPU's MIG plan stays pending until the layout is
re-created with exact placements. The gpufleet agent applies gpufleet's MIG plans itself,
with exact placements: use this file only where mig-parted, not the agent, manages a
node's MIG layout.

Layouts: a GPU's pending gpufleet MIG plan where one exists, else the instances its node
reports. One config per distinct node layout, devices by GPU index; a node selects its
config by name:
  nvidia-mig-parted apply -f <this file> -c <config>
  kubectl label node <node> {MIG_CONFIG_LABEL}=<config> --overwrite
The node -> config map is in GET /api/v1/mig/configs?format=json (gpufleet mig export --json).
"""


def render_yaml(spec: dict[str, Any], nodes: list[NodeMigConfig], notes: list[str], *,
                now: datetime, generator: str, node: str | None,
                environment: str | None) -> str:
    lines = _comment(_header(now, generator, node, environment))
    lines += [f"# Note: {note}" for note in notes]
    lines += [yaml.dump({"version": spec["version"]}, Dumper=_Dumper).rstrip()]
    by_config: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        by_config[n.config].append(n.node)
    if spec.get("mig-configs"):
        lines.append("mig-configs:")
    for name, specs in spec.get("mig-configs", {}).items():
        users = by_config[name]
        shown = ", ".join(users[:NODES_NAMED_PER_CONFIG])
        more = len(users) - NODES_NAMED_PER_CONFIG
        lines.append("")
        lines += _comment(f"{len(users)} node{'s' if len(users) != 1 else ''}: {shown}"
                          + (f" and {more} more" if more > 0 else ""), "  ")
        dumped = yaml.dump({name: _styled(specs)}, Dumper=_Dumper, sort_keys=False)
        lines += [f"  {line}" for line in dumped.rstrip().splitlines()]
    return "\n".join(lines) + "\n"
