"""A MIG GPU's layout drawn to scale on the server as SVG (docs/dashboard.md, "Node").

One column per memory slice of the model (8 on an H100, 4 on an A30); each GPU instance a
rectangle from its placement start across its size, labelled with its profile and the
allocation holding it. The slice count comes from the model's geometry
(`domain/data/mig_geometry.json`); an instance that reports no placement size takes its
profile's. Colours are CSS classes (`mig-held`, `mig-free`, `mig-hidden`, `mig-health-*`),
so both themes and the page's Content-Security-Policy hold. The same instances are listed
in a table under the drawing for anyone who cannot see it."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

from markupsafe import Markup, escape

from gpufleet.domain.placement.mig_plans import geometry_of
from gpufleet.wire.inventory import GpuView

SLICE_W, BAR_H, AXIS_H = 80, 60, 18  # one slice's width; an instance's height; slice numbers
_ids = count()


@dataclass(frozen=True)
class DrawnInstance:
    """One GPU instance as drawn. `allocations`: () when it is free, None when not known
    or not shown to this viewer (a member sees only their projects' holders)."""

    profile: str
    start: int | None
    size: int | None
    mig_uuid: str | None
    allocations: tuple[str, ...] | None
    health: str

    @property
    def held_by(self) -> str:
        if self.allocations is None:
            return "—"
        return ", ".join(self.allocations) or "free"

    @property
    def state(self) -> str:
        if self.allocations is None:
            return "hidden"
        return "held" if self.allocations else "free"

    @property
    def end(self) -> int | None:
        """The last slice it covers (inclusive)."""
        return None if self.start is None or self.size is None else self.start + self.size - 1


@dataclass(frozen=True)
class Layout:
    gpu_uuid: str
    gpu_index: int
    model: str
    slices: int | None  # memory slices of the model; None: gpufleet has no geometry for it
    instances: tuple[DrawnInstance, ...]

    @property
    def drawable(self) -> bool:
        return self.slices is not None and any(i.start is not None and i.size is not None
                                               for i in self.instances)


def layout_of(gpu: GpuView, holders: dict[str | None, tuple[str, ...]] | None) -> Layout:
    """The GPU's instances by placement. `holders`: the allocations holding each instance
    (by MIG UUID) as the viewer may see them; an instance missing from it is not known to
    this viewer (`holders` None: not known at all, e.g. the telemetry store failed)."""
    geometry = geometry_of(gpu.model)
    instances = []
    for m in gpu.mig_instances:
        size = m.placement_size
        if size is None and geometry is not None:
            profile = geometry.profile(m.profile_id)
            size = profile.memory_slices if profile is not None else None
        allocations = None if holders is None else holders.get(m.mig_uuid)
        instances.append(DrawnInstance(m.profile_name, m.placement_start, size, m.mig_uuid,
                                       allocations, m.health))
    instances.sort(key=lambda i: (i.start is None, i.start or 0, i.profile))
    return Layout(gpu.uuid, gpu.index, gpu.model,
                  geometry.memory_slices_total if geometry is not None else None,
                  tuple(instances))


def layout_svg(layout: Layout) -> Markup:
    """The drawing: `role="img"` with a title and a description that says every instance."""
    if not layout.drawable:
        return Markup("")
    svg_id = f"mig-{next(_ids)}"
    width, height = layout.slices * SLICE_W, BAR_H + AXIS_H
    parts = [f'<svg class="mig" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" role="img" aria-labelledby="{svg_id}-t {svg_id}-d">',
             f'<title id="{svg_id}-t">GPU {layout.gpu_index} ({escape(layout.model)}): MIG '
             f'layout on {layout.slices} memory slices</title>',
             f'<desc id="{svg_id}-d">{escape(_description(layout))}</desc>']
    for s in range(layout.slices):
        parts.append(f'<rect class="mig-slice" x="{s * SLICE_W}" y="0" width="{SLICE_W}" '
                     f'height="{BAR_H}"/>')
        parts.append(f'<text class="mig-axis" x="{s * SLICE_W + SLICE_W / 2:g}" '
                     f'y="{height - 4}" text-anchor="middle">{s}</text>')
    for one in layout.instances:
        if one.start is None or one.size is None:
            continue
        x, w = one.start * SLICE_W + 2, one.size * SLICE_W - 4
        middle = x + w / 2
        parts.append(
            f'<g class="mig-instance mig-{one.state} mig-health-{escape(one.health)}">'
            f'<title>{escape(one.profile)} · {escape(one.mig_uuid or "MIG UUID not reported")}'
            f' · {escape(one.held_by)}</title>'
            f'<rect x="{x}" y="2" width="{w}" height="{BAR_H - 4}" rx="4"/>'
            f'<text x="{middle:g}" y="{BAR_H / 2 - 4:g}" text-anchor="middle" '
            f'class="mig-profile">{escape(one.profile)}</text>'
            f'<text x="{middle:g}" y="{BAR_H / 2 + 12:g}" text-anchor="middle" '
            f'class="mig-holder">{escape(one.held_by)}</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _description(layout: Layout) -> str:
    said = []
    for one in layout.instances:
        where = (f"slices {one.start}–{one.end}" if one.start is not None and one.end is not None
                 else "placement not reported")
        said.append(f"{one.profile} on {where}: {one.held_by}"
                    + ("" if one.health == "healthy" else f" ({one.health})"))
    return "; ".join(said) or "no GPU instances"


def install(env) -> None:
    env.globals.update(mig_layout_svg=layout_svg)
