"""`gpufleet whatif WORKLOAD`: replay a workload against a real or hypothetical fleet.

The fleet is one of: an openb node list (`--nodes-csv`), a fleet spec (`--fleet-spec FILE`
or `default`), or the live fleet (`--live`, fetched from the server with the stored login).
The replay runs the same placement engine as the live fleet (docs/whatif.md).

Bad input — a missing file, a malformed line, an unknown policy or model — ends the
command with one `error:` line and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag
from gpufleet.cli.output import print_json, show
from gpufleet.domain.placement import DEFAULT_MAX_CANDIDATES, POLICIES, FleetState
from gpufleet.whatif import (
    Report,
    WhatifError,
    build_report,
    fleet_from_json,
    fleet_from_spec,
    load_workload,
    openb_fleet,
    replay,
)
from gpufleet.whatif.replay import placement_record
from gpufleet.whatif.workloads import FORMATS

FLEET_STATE_PATH = ("placement", "fleet-state")
BAD_INPUT = 2


def _fail(message: str) -> typer.Exit:
    """One line on stderr (a YAML parser's multi-line message is folded), exit status 2."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    typer.echo(f"error: {line}", err=True)
    return typer.Exit(BAD_INPUT)


def live_fleet() -> FleetState:
    """The live fleet as the server's placement sees it (`GET /api/v1/placement/fleet-state`)."""
    with connect() as api:
        data = api.get(api_path(*FLEET_STATE_PATH))
    return fleet_from_json(data, "the server's fleet state")


def _spec_fleet(source: str) -> FleetState:
    from gpufleet.sim.fleet_spec import FleetSpecError, load_default_spec, load_spec

    try:
        spec = load_default_spec() if source == "default" else load_spec(source)
    except FleetSpecError as exc:
        raise WhatifError(str(exc)) from None
    return fleet_from_spec(spec)


def _fleet(nodes_csv: Path | None, fleet_spec: str | None, live: bool) -> tuple[FleetState, bool]:
    """The fleet, and whether whole GPUs may come from shared GPUs (openb semantics)."""
    given = sum((nodes_csv is not None, fleet_spec is not None, live))
    if given != 1:
        raise WhatifError("give exactly one fleet: --nodes-csv FILE, --fleet-spec FILE|default "
                          "or --live")
    if nodes_csv is not None:
        return openb_fleet(nodes_csv), True
    if fleet_spec is not None:
        return _spec_fleet(fleet_spec), False
    return live_fleet(), False


def report_table(report: Report) -> Table:
    table = Table(title=f"what-if: policy {report.policy}", show_header=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("tasks", f"{report.tasks:,}")
    table.add_row("placed", f"{report.placed:,}")
    table.add_row("refused", f"{report.refused:,}")
    for reason, count in report.refused_by_reason.items():
        table.add_row(f"  refused: {reason}", f"{count:,}")
    if report.departed:
        table.add_row("departed", f"{report.departed:,}")
    table.add_row("fleet", f"{report.nodes:,} nodes, {report.gpus:,} GPUs")
    table.add_row("GPU allocation ratio", f"{report.allocation_ratio:.2%}")
    if report.departed:
        table.add_row("peak allocation ratio", f"{report.peak_allocation_ratio:.2%}")
    table.add_row("free milli-GPU", f"{report.free_milli:,}")
    table.add_row("fragmentation (share of free)", f"{report.fragmentation_ratio:.2%}")
    table.add_row("stranded by fragmentation (share of fleet)", f"{report.stranded_ratio:.2%}")
    for model, ratio in report.allocation_by_model.items():
        table.add_row(f"  allocated: {model}", f"{ratio:.2%}")
    return table


def whatif(
    workload: Annotated[Path, typer.Argument(
        help="The workload: an openb pod CSV, an openb requests/*.jsonl sequence, or a "
             "gpufleet trace (JSON lines; docs/whatif.md).")],
    nodes_csv: Annotated[Path | None, typer.Option(
        "--nodes-csv", help="Fleet: an openb node list (openb_node_list_gpu_node.csv).")] = None,
    fleet_spec: Annotated[str | None, typer.Option(
        "--fleet-spec", help="Fleet: a fleet spec YAML file, or `default` for the shipped "
                             "demo fleet.")] = None,
    live: Annotated[bool, typer.Option(
        "--live", help="Fleet: the live fleet of the server you are logged in to.")] = False,
    workload_format: Annotated[str, typer.Option(
        "--format", help=f"Workload format: {', '.join(FORMATS)}.")] = "auto",
    policy: Annotated[str, typer.Option(
        "--policy", help=f"Placement policy: {', '.join(POLICIES)}.")] = "default",
    seed: Annotated[int, typer.Option("--seed", help="Seed for tie-breaks.")] = 0,
    max_candidates: Annotated[int, typer.Option(
        "--max-candidates", min=1,
        help="Candidate nodes scored per decision.")] = DEFAULT_MAX_CANDIDATES,
    placements_out: Annotated[Path | None, typer.Option(
        "--placements-out", help="Write every decision as JSON lines, in request order "
                                 "(openb format).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Replay a workload through the placement engine and report allocation, refusals and
    fragmentation."""
    try:
        if policy not in POLICIES:
            raise WhatifError(f"unknown placement policy {policy!r}; known: "
                              f"{', '.join(POLICIES)}")
        fleet, from_shared = _fleet(nodes_csv, fleet_spec, live)
        tasks = load_workload(workload, workload_format)
        columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn())
        with Progress(*columns, transient=True, disable=as_json) as bar:
            job = bar.add_task("replay", total=len(tasks))
            result = replay(fleet, tasks, policy=policy, seed=seed,
                            whole_gpus_from_shared=from_shared, max_candidates=max_candidates,
                            progress=lambda n: bar.advance(job, n))
        if placements_out is not None:
            _write_placements(placements_out, result.outcomes)
    except WhatifError as exc:
        raise _fail(str(exc)) from None
    report = build_report(result)
    if as_json:
        print_json(report.to_json())
    else:
        show(report_table(report))


def _write_placements(path: Path, outcomes) -> None:
    try:
        with path.open("w") as handle:
            for outcome in outcomes:
                handle.write(json.dumps(placement_record(outcome)) + "\n")
    except OSError as exc:
        raise WhatifError(f"{path}: cannot write the placements: {exc.strerror}") from None
