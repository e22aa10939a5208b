"""Objects as tables: the fleet summary, GPUs and nodes, and project quotas.

Each function takes the API's JSON (a dict, exactly as `--json` would print it) and
returns a Rich renderable, so what a table shows can never drift from what the API said.
Rich is imported where a table is drawn, so `--json` never loads it (see `output`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from gpufleet.cli.output import fields, gib, labels_text, plural, table, when
from gpufleet.domain.inventory import GpuStatus

if TYPE_CHECKING:
    from rich.console import RenderableType

STATUS_ORDER = [status.value for status in GpuStatus]
RETIRED = GpuStatus.RETIRED.value


def _status_columns(cells: list[dict[str, Any]]) -> list[str]:
    present = {cell["status"] for cell in cells}
    return [s for s in STATUS_ORDER if s in present] + sorted(present - set(STATUS_ORDER))


def summary_table(summary: dict[str, Any]) -> RenderableType:
    """Environment × model rows, one column per status that occurs, and totals.

    The status columns add up to `total`, which leaves retired GPUs out as the API's
    `total_gpus` does; retired GPUs, when there are any, are counted apart in a last column
    after it. An environment with no GPUs still gets a row, so a freshly created one is
    visibly empty, not missing.
    """
    cells = summary["cells"]
    statuses = [s for s in _status_columns(cells) if s != RETIRED]
    any_retired = any(cell["status"] == RETIRED for cell in cells)
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cell in cells:
        counts[(cell["environment"], cell["model"])][cell["status"]] += cell["gpus"]
    for env in summary["by_environment"]:
        if not any(key[0] == env["environment"] for key in counts):
            counts[(env["environment"], "")] = defaultdict(int)

    def row(environment: str, model: str, by_status: dict[str, int]) -> list[Any]:
        live = [by_status.get(s, 0) for s in statuses]
        return [environment, model, *live, sum(live),
                *([by_status.get(RETIRED, 0)] if any_retired else [])]

    title = (f"{plural(summary['total_gpus'], 'GPU')} on {plural(summary['nodes'], 'node')}"
             + (f" ({summary['retired_gpus']} retired)" if summary["retired_gpus"] else ""))
    result = table(["environment", "model", *statuses, "total",
                    *([RETIRED] if any_retired else [])],
                   [row(env, model, by) for (env, model), by in sorted(counts.items())],
                   title=title, caption="total: the status columns' sum"
                   + ("; retired GPUs are counted apart, after it" if any_retired else ""))
    totals: dict[str, int] = defaultdict(int)
    for cell in cells:
        totals[cell["status"]] += cell["gpus"]
    result.add_section()
    result.add_row(*(str(v) for v in row("all", "", totals)), style="bold")
    for column in result.columns[2:]:
        column.justify = "right"
    return result


def gpus_table(gpus: list[dict[str, Any]], *, title: str | None = None) -> RenderableType:
    rows = [[g["uuid"], g["node"], g["environment"], g["index"], g["model"],
             gib(g["memory_bytes"]), g["sharing_mode"], g["health"], g["status"],
             labels_text(g["labels"])] for g in gpus]
    return table(["uuid", "node", "env", "idx", "model", "GiB", "mode", "health", "status",
                  "labels"], rows, title=title)


def nodes_table(nodes: list[dict[str, Any]]) -> RenderableType:
    rows = [[n["name"], n["environment"], n["status"], n["gpus"], n["cpu_cores"],
             gib(n["memory_bytes"]), labels_text(n["labels"]), n["agent_version"],
             when(n["last_seen_at"])] for n in nodes]
    return table(["name", "env", "status", "GPUs", "CPU cores", "memory GiB", "labels",
                  "agent", "last seen"], rows)


def _nvlink_text(peers: list[str] | None) -> str | None:
    if peers is None:
        return "not reported"
    return "\n".join(peers) if peers else "none"


def gpu_detail(gpu: dict[str, Any]) -> RenderableType:
    """One GPU: its identity, state, NVLink peers and MIG instances."""
    health = gpu["health"] + (f" ({gpu['health_reason']})" if gpu.get("health_reason") else "")
    device_id = gpu["pci_device_id"]
    about = fields({
        "uuid": gpu["uuid"], "node": gpu["node"], "environment": gpu["environment"],
        "index": gpu["index"],
        "model": gpu["model"] + ("" if gpu["model_known"] else " (not in the catalogue)"),
        "reported name": gpu["reported_name"], "memory GiB": gib(gpu["memory_bytes"]),
        "PCI bus id": gpu["pci_bus_id"],
        "PCI device id": None if device_id is None else f"0x{device_id:08X}",
        "driver": gpu["driver_version"], "sharing mode": gpu["sharing_mode"],
        "health": health, "status": gpu["status"], "labels": labels_text(gpu["labels"]),
        "NVLink peers": _nvlink_text(gpu["nvlink_peers"]),
        "first seen": when(gpu["first_seen_at"]),
    }, title=f"GPU {gpu['uuid']}")
    if not gpu["mig_instances"]:
        return about
    from rich.console import Group

    mig = table(["profile id", "profile", "start", "size", "GiB", "MIG uuid", "GI", "CI"],
                [[m["profile_id"], m["profile_name"], m["placement_start"],
                  m["placement_size"], gib(m["memory_bytes"]), m["mig_uuid"],
                  m["gpu_instance_id"], m["compute_instance_id"]]
                 for m in gpu["mig_instances"]], title="MIG instances")
    return Group(about, "", mig)


def node_detail(node: dict[str, Any]) -> RenderableType:
    """One node and its GPUs."""
    status = node["status"] + (f" ({node['status_reason']})" if node.get("status_reason")
                               else "")
    about = fields({
        "name": node["name"], "environment": node["environment"], "status": status,
        "machine id": node["machine_id"], "CPU cores": node["cpu_cores"],
        "memory GiB": gib(node["memory_bytes"]), "labels": labels_text(node["labels"]),
        "agent": node["agent_version"], "OS": node["os_name"],
        "driver": node["driver_version"], "CUDA": node["cuda_version"],
        "registered": when(node["registered_at"]), "last seen": when(node["last_seen_at"]),
        "GPUs": node["gpus"], "desired state version": node["desired_state_version"],
    }, title=f"node {node['name']}")
    from rich.console import Group

    return Group(about, "", gpus_table(node["gpu_list"], title="GPUs"))


def _units(value: float | None) -> str | None:
    return None if value is None else f"{value:g}"


def quota_table(quotas: list[dict[str, Any]], *, title: str | None = None) -> RenderableType:
    """Quota rows (`project quota show`, `request why`); a limit of `-` means none."""
    return table(["flavour", "limit", "used", "pooled", "available"],
                 [[q["flavour"], _units(q["limit"]), _units(q["used"]), _units(q["pooled"]),
                   _units(q["available"])] for q in quotas], title=title)
