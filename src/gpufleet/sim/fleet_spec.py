"""Fleet specs: which simulated nodes exist, in which environments, with which MIG layouts.

A spec is YAML an operator can read and edit (the shipped `default_fleet.yaml` is the
KT-like demo fleet). Everything is checked when the spec loads — unknown fields, unknown
shapes and environments, MIG on GPUs that cannot do it, layouts the hardware refuses — so
a bad spec fails with one clear message before any node is built or any server called.
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigInstanceSpec
from gpufleet.wire.base import LabelKey, LabelValue, Name
from gpufleet.wire.inventory import EnvironmentCreate

from .mig_layouts import LayoutEntry, MigLayoutError, resolve_layout
from .shapes import Shape, shape_named

HostnamePrefix = Annotated[str, StringConstraints(
    min_length=1, max_length=48, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]


class FleetSpecError(ValueError):
    """A spec that cannot be loaded; the message names the file and every problem."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvironmentSpec(EnvironmentCreate):
    """An environment as a spec declares it: exactly what the API's create takes."""


class NodeGroupSpec(_Spec):
    environment: Name
    shape: str
    count: int = Field(ge=1, le=1_000_000)
    hostname_prefix: HostnamePrefix
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=32)
    sharing_mode: SharingMode | None = Field(default=None, description=(
        "Overrides the environment's default for this group's GPUs."))
    mig_layouts: list[list[LayoutEntry]] | None = Field(default=None, min_length=1, description=(
        "MIG layouts (profile names or ids, `name@start` to pin a placement) given to the "
        "group's GPUs in turn; default: the shape's own layouts, if it is a MIG node."))
    mig_layout_assignment: Literal["round_robin", "random"] = "round_robin"
    zones: list[LabelValue] | None = Field(default=None, min_length=1, description=(
        "Availability zones given to the group's nodes in turn, as the `zone` label."))
    rack_size: int | None = Field(default=None, ge=1, description=(
        "Nodes per rack: adds a `rack` label, `<hostname_prefix>-r01`, `-r02`, ..."))

    @field_validator("shape")
    @classmethod
    def _known_shape(cls, name: str) -> str:
        shape_named(name)
        return name

    @model_validator(mode="after")
    def _layouts_fit(self) -> NodeGroupSpec:
        if self.mig_layouts is None:
            return self
        geometry = self.shape_info.gpu.mig_geometry
        if geometry is None:
            raise ValueError(f"shape {self.shape} has {self.shape_info.gpu.model_key} GPUs, "
                             f"which cannot do MIG; remove mig_layouts")
        for number, layout in enumerate(self.mig_layouts):
            try:
                resolve_layout(geometry, layout)
            except MigLayoutError as exc:
                raise ValueError(f"mig_layouts[{number}] is not valid on "
                                 f"{self.shape_info.gpu.model_key}: {exc}") from None
        return self

    @property
    def shape_info(self) -> Shape:
        return shape_named(self.shape)

    @property
    def gpu_count(self) -> int:
        return self.count * self.shape_info.gpu_count

    def hostname(self, number: int) -> str:
        """The hostname of the group's `number`-th node (0-based), e.g. `dgx-h100-007`."""
        width = max(3, len(str(self.count)))
        return f"{self.hostname_prefix}-{number + 1:0{width}d}"

    def node_labels(self, number: int) -> dict[str, str]:
        labels = dict(self.labels)
        if self.shape_info.instance_type:
            labels.setdefault("instance-type", self.shape_info.instance_type)
        if self.zones:
            labels["zone"] = self.zones[number % len(self.zones)]
        if self.rack_size:
            labels["rack"] = f"{self.hostname_prefix}-r{number // self.rack_size + 1:02d}"
        return labels

    def layout_sources(self) -> tuple[tuple[LayoutEntry, ...], ...]:
        if self.mig_layouts is not None:
            return tuple(tuple(layout) for layout in self.mig_layouts)
        return self.shape_info.mig_layouts

    @cached_property
    def resolved_layouts(self) -> tuple[tuple[MigInstanceSpec, ...], ...]:
        geometry = self.shape_info.gpu.mig_geometry
        if geometry is None:
            return ()
        return tuple(resolve_layout(geometry, layout) for layout in self.layout_sources())


class FleetSpec(_Spec):
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    environments: list[EnvironmentSpec] = Field(min_length=1)
    node_groups: list[NodeGroupSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> FleetSpec:
        names = Counter(env.name for env in self.environments)
        if duplicates := [name for name, n in names.items() if n > 1]:
            raise ValueError(f"environments named twice: {', '.join(duplicates)}")
        for number, group in enumerate(self.node_groups):
            where = f"node_groups[{number}] ({group.hostname_prefix})"
            if group.environment not in names:
                raise ValueError(f"{where}: unknown environment {group.environment!r}; "
                                 f"the spec defines: {', '.join(names)}")
            mode = self.sharing_mode(group)
            if mode is SharingMode.MIG and group.shape_info.gpu.mig_geometry is None:
                raise ValueError(f"{where}: {group.shape_info.gpu.model_key} GPUs cannot do "
                                 f"MIG; set sharing_mode to exclusive or shared")
            if group.mig_layouts is not None and mode is not SharingMode.MIG:
                raise ValueError(f"{where}: mig_layouts given, but the group's sharing mode "
                                 f"is {mode.value}; set sharing_mode: mig")
        prefixes = Counter(group.hostname_prefix for group in self.node_groups)
        if duplicates := [p for p, n in prefixes.items() if n > 1]:
            raise ValueError(f"hostname prefixes used by two node groups: {', '.join(duplicates)}")
        hostnames = Counter(g.hostname(i) for g in self.node_groups for i in range(g.count))
        if duplicates := [h for h, n in hostnames.items() if n > 1][:5]:
            raise ValueError(f"node groups generate the same hostnames: {', '.join(duplicates)}")
        return self

    def environment(self, name: str) -> EnvironmentSpec:
        return next(env for env in self.environments if env.name == name)

    def sharing_mode(self, group: NodeGroupSpec) -> SharingMode:
        """The group's override, else `mig` for a MIG node shape, else the environment's."""
        if group.sharing_mode is not None:
            return group.sharing_mode
        if group.mig_layouts is not None or group.shape_info.mig_layouts:
            return SharingMode.MIG
        return self.environment(group.environment).default_sharing_mode

    @property
    def node_count(self) -> int:
        return sum(group.count for group in self.node_groups)

    @property
    def gpu_count(self) -> int:
        return sum(group.gpu_count for group in self.node_groups)

    def gpus_by_environment(self) -> dict[str, int]:
        totals = {env.name: 0 for env in self.environments}
        for group in self.node_groups:
            totals[group.environment] += group.gpu_count
        return totals


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def parse_spec(data: object, source: str = "fleet spec") -> FleetSpec:
    """A spec from already-parsed YAML / JSON data; FleetSpecError naming `source` if bad."""
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise FleetSpecError(f"{source}: {_describe(exc)}") from None


def parse_spec_text(text: str, source: str = "fleet spec") -> FleetSpec:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetSpecError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise FleetSpecError(f"{source}: expected a mapping with seed, environments, node_groups")
    return parse_spec(data, source)


def load_spec(path: str | Path) -> FleetSpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FleetSpecError(f"{path}: cannot read the fleet spec: {exc.strerror}") from None
    return parse_spec_text(text, str(path))


def load_default_spec() -> FleetSpec:
    """The shipped KT-like demo fleet (about 1,700 GPUs in three environments)."""
    text = resources.files("gpufleet.sim").joinpath("default_fleet.yaml").read_text()
    return parse_spec_text(text, "default_fleet.yaml")
