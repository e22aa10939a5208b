"""`gpufleet query | funnel | idle | top`: the fleet's telemetry, over HTTP.

Durations are typed as people say them (`6h`, `30m`, `7d`); the server parses them and
answers a bad one with a message naming it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, query
from gpufleet.cli.output import cell_text, emit, gib, note, plural, table, when

By = Annotated[list[str] | None, typer.Option(
    "--by", help="Group by this label (environment, node, model, gpu_uuid, mig_profile, "
                 "project, allocation); repeat or comma-separate for several.")]


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def query_command(
    metric: Annotated[str, typer.Argument(help="A catalogue metric, e.g. gpu.sm_active.")],
    by: By = None,
    since: Annotated[str, typer.Option("--since", help="How far back: 30m, 6h, 7d.")] = "1h",
    step: Annotated[str | None, typer.Option("--step", help="Resolution: 1m, 5m, 1h "
                                                            "(default: ~240 points).")] = None,
    filters: Annotated[list[str] | None, typer.Option(
        "--filter", "-f", help="label=value; repeat for several.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A metric over time per group, aggregated by its class (percentages averaged,
    usage summed)."""
    with connect() as api:
        result = api.get(api_path("telemetry", "query"), query(
            metric=metric, by=by or [], since=since, step=step, filter=filters or []))
    emit(result, as_json, _query_table)


def _query_table(result: dict[str, Any]):
    by = result["by"]
    rows = []
    for s in result["series"]:
        values = [v for _, v in s["points"]]
        last = s["points"][-1] if s["points"] else (None, None)
        rows.append([*(s["labels"].get(name) for name in by),
                     _value(sum(values) / len(values) if values else None, result["unit"]),
                     _value(min(values, default=None), result["unit"]),
                     _value(max(values, default=None), result["unit"]),
                     _value(last[1], result["unit"]), when(last[0]), len(values)])
    return table([*by, "mean", "min", "max", "last", "last at", "points"], rows,
                 title=f"{result['metric']} ({result['unit']}), step {result['step_s']:g} s, "
                       f"{when(result['start'])} – {when(result['end'])}")


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{gib(int(value))} GiB" if unit == "bytes" else _num(value)


def funnel_command(
    by: By = None,
    window: Annotated[str, typer.Option("--window", help="The window: 24h, 7d.")] = "24h",
    as_json: JsonFlag = False,
) -> None:
    """Total / allocated / active / effective GPU-hours over the window (docs/design.md, Funnel and
    activity)."""
    with connect() as api:
        view = api.get(api_path("telemetry", "funnel"), query(by=by or [], window=window))
    emit(view, as_json, _funnel_table)


def _funnel_table(view: dict[str, Any]):
    by = view["by"]
    columns = [*by, "total", "reporting", "silent", "allocated", "active", "effective",
               "unknown", "efficiency %"]

    def cells(row):
        return [*(row["group"].get(name) for name in by),
                *(_num(row[f"{k}_gpu_hours"]) for k in ("total", "reporting", "silent",
                                                         "allocated", "active", "effective",
                                                         "unknown")),
                _num(row["efficiency_percent"])]
    rows = [cells(r) for r in view["rows"]]
    if by:
        rows.append(["fleet", *[""] * (len(by) - 1), *cells(view["fleet"])[len(by):]])
    return table(columns, rows or [cells(view["fleet"])],
                 title=f"GPU-hours {when(view['window_start'])} – {when(view['window_end'])}",
                 caption=f"active: activity ≥ {view['activity_threshold_percent']:g} %; "
                         f"effective: sm_active ≥ {view['effective_sm_active_percent']:g} %")


def idle_command(
    held_only: Annotated[bool, typer.Option("--held-only", help="Only idle-held (memory "
                                                                "held, nothing computed).")]
    = False,
    project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Allocations idle for the whole idle window, and since when."""
    with connect() as api:
        view = api.pages(api_path("telemetry", "idle"),
                         query(held_only=held_only or None, project=project), follow=True)
    emit(view, as_json, lambda v: table(
        ["allocation", "project", "gpu", "mig", "node", "state", "idle since", "memory GiB"],
        [[i["allocation"], i["project"], i["gpu_uuid"], i["mig_profile"] or i["mig_uuid"],
          i["node"], i["state"], when(i["idle_since"]), gib(_int(i["memory_held_bytes"]))]
         for i in v["items"]],
        title=f"idle for {_window_text(v['window_hours'])} (activity < "
              f"{v['activity_threshold_percent']:g} %)",
        caption=_idle_caption(v)))


def zombies_command(as_json: JsonFlag = False) -> None:
    """Processes holding GPU memory with no binding, after their binding ended, or doing
    nothing for the idle window."""
    _show_list("zombies", "no zombie processes", as_json, lambda rows: table(
        ["gpu", "mig", "node", "pid", "process", "memory GiB", "reason", "allocation",
         "project", "last seen"],
        [[z["gpu_uuid"], z["mig_uuid"], z["node"], z["pid"], z["name"],
          gib(_int(z["memory_used_bytes"])), z["reason"], z["allocation"], z["project"],
          when(z["last_seen_at"])] for z in rows],
        caption="reasons: no_binding (nobody holds the unit) · binding_ended (its "
                "allocation ended) · no_sm_activity (no SM activity of its own for the idle "
                "window)"))


def unattributed_command(as_json: JsonFlag = False) -> None:
    """Usage charged to nobody: on units no binding holds, or claiming an allocation that
    does not hold its unit."""
    _show_list("unattributed", "no unattributed usage", as_json, lambda rows: table(
        ["gpu", "mig", "node", "kind", "reason", "pid", "process", "claims", "bound to",
         "memory GiB", "activity %", "last seen"],
        [[u["gpu_uuid"], u["mig_uuid"], u["node"], u["kind"], u["reason"], u["pid"],
          u["name"], u["claimed_allocation"] or _workload_text(u["workload"]),
          ", ".join(u["bound_allocations"]), gib(_int(u["memory_used_bytes"])),
          _num(u["activity_percent"]), when(u["last_seen_at"])] for u in rows],
        caption="reasons: unbound (no binding holds the unit) · mismatch (it claims an "
                "allocation that does not hold the unit)"))


def _show_list(route: str, when_empty: str, as_json: bool,
               render: Callable[[list[dict[str, Any]]], Any]) -> None:
    """A telemetry list (`/telemetry/<route>`): its table, or one line when it is empty."""
    with connect() as api:
        found = api.get(api_path("telemetry", route))
    if not as_json and not found:
        note(when_empty)
        return
    emit(found, as_json, render)


def _workload_text(workload: dict[str, str]) -> str | None:
    return " ".join(f"{k}={v}" for k, v in sorted(workload.items())) or None


def _idle_caption(idle: dict[str, Any]) -> str | None:
    """Why allocated units are missing from the list: not judged yet (bound for less than
    the window), or their activity was known for too few of its minutes."""
    parts = []
    if idle["unknown"]:
        best = idle.get("unknown_best_known_minutes")
        known = f", at best {best:g} known" if best is not None else ""
        parts.append(f"{plural(idle['unknown'], 'allocated unit')} with activity unknown "
                     f"(a unit needs {idle.get('known_minutes_needed', 0)} of the window's "
                     f"{idle['window_hours'] * 60:g} minutes known{known})")
    if idle.get("too_new"):
        parts.append(f"{plural(idle['too_new'], 'allocated unit')} bound for less than the "
                     f"window: not judged yet")
    return "; ".join(parts) or None


def _window_text(hours: float) -> str:
    return f"{hours * 60:g} min" if hours < 1 else f"{hours:g} h"


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def top_command(
    once: Annotated[bool, typer.Option("--once", help="Print once and exit (scripts).")]
    = False,
    interval_s: Annotated[float, typer.Option("--interval-s", min=0.5,
                                              help="Seconds between refreshes.")] = 5.0,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100)] = 10,
    as_json: JsonFlag = False,
) -> None:
    """A live view of the fleet: per environment and project, busiest and idlest GPUs."""
    with connect() as api:
        def fetch() -> dict[str, Any]:
            return api.get(api_path("telemetry", "top"), query(limit=limit))
        if once or as_json:
            emit(fetch(), as_json, _top_view)
            return
        with Live(_top_view(fetch()), auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(interval_s)
                live.update(_top_view(fetch()), refresh=True)


TOP_COLUMNS_EXPLAINED = (
    "units: GPUs and MIG instances that reported in the last 5 min · allocated GPUs: the "
    "GPU share bindings hold · activity: mean of each unit's best activity signal · "
    "sm_active: mean SM active · memory: used")
TOP_FIXED_LINES = 20  # about the lines `top` prints besides its project and unit rows


def _top_view(view: dict[str, Any], height: int | None = None):
    """The fleet, its environments, the projects holding the most GPUs (as many as the
    terminal has room for; all with --json) and the busiest and idlest units."""
    height = height or shutil.get_terminal_size().lines

    def groups(rows, label, caption=None):
        return table([label, "units", "allocated GPUs", "activity %", "sm_active %",
                      "memory GiB"],
                     [[cell_text(g["group"].get(label)) if g["group"] else "fleet", g["units"],
                       _num(g["allocated_gpus"], 2), _num(g["activity_percent"]),
                       _num(g["sm_active_percent"]), gib(_int(g["memory_used_bytes"]))]
                      for g in rows], caption=caption)

    def units(rows, title):
        return table(["gpu", "mig", "node", "activity %", "sm_active %", "memory GiB",
                      "charged to"],
                     [[u["gpu_uuid"], u["mig_uuid"], u["node"], _num(u["activity_percent"]),
                       _num(u["sm_active_percent"]), gib(_int(u["memory_used_bytes"])),
                       ", ".join(f"{c['allocation']} ({c['project']})"
                                 for c in u["charged_to"])] for u in rows],
                     title=title)
    environments = [view["fleet"], *view["by_environment"]]
    projects = view["by_project"]
    room = height - TOP_FIXED_LINES - len(environments) - len(view["busiest"]) \
        - len(view["idlest_allocated"])
    shown = projects[:max(room, 3)]
    more = len(projects) - len(shown)
    return Group(table(["at"], [[when(view["at"])]]),
                 groups(environments, "environment", caption=TOP_COLUMNS_EXPLAINED),
                 groups(shown, "project", caption=(
                     f"the {len(shown)} projects holding the most GPUs; {more} more: "
                     "`gpufleet funnel --by project`, or --json") if more else None),
                 units(view["busiest"], "busiest"),
                 units(view["idlest_allocated"], "idlest allocated"))


