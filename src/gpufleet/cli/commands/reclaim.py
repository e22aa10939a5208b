"""`gpufleet reclaim …`: idle allocations back to the pool (docs/operations.md, "Reclamation").

`reclaim policy set|ls|rm` shapes what happens per environment and project (the project's
word wins, field by field, over its environment's and the server's default); `reclaim run
--dry-run` shows what a round would do now; `reclaim report --window 30d` what came back.
Exemptions are `gpufleet request exempt GR-1042 --reason … --hours 24`.
"""

from datetime import timedelta
from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, body, query
from gpufleet.cli.output import RenderableType, done, emit, note, print_json, table, when
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.reclaim_policy import IdleHeld, ReclaimAction, Scope
from gpufleet.domain.telemetry.durations import parse_duration

app = typer.Typer(help="Reclamation: idle allocations back to the pool.", no_args_is_help=True)
policy = typer.Typer(help="Reclamation policies per environment and project.",
                     no_args_is_help=True)
app.add_typer(policy, name="policy")

Project = Annotated[str | None, typer.Option("--project", "-p", help="A project's policy.")]
Environment = Annotated[str | None, typer.Option(
    "--environment", "-e", help="An environment's policy.")]
FIELDS = ("idle_window_hours", "idle_held", "grace_minutes", "end_warning_lead_hours",
          "action", "enabled", "dry_run")


def span_of(flag: str, text: str | None, unit_s: int) -> float | None:
    """`--grace 30m` → 30 (minutes, for unit_s 60); `0` is zero; anything else a usage
    error naming the flag."""
    if text is None:
        return None
    if text.strip() in ("0", "0s", "0m", "0h"):
        return 0.0
    try:
        return parse_duration(text, name=flag).total_seconds() / unit_s
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message) from None


def _scope(project: str | None, environment: str | None) -> tuple[Scope, str]:
    if (project is None) == (environment is None):
        raise typer.BadParameter("give one of --project and --environment")
    return (Scope.PROJECT, project) if project is not None else (Scope.ENVIRONMENT,
                                                                   environment)


def _hours(value: float | None) -> str | None:
    return None if value is None else _span_text(timedelta(hours=value))


def _minutes(value: float | None) -> str | None:
    return None if value is None else _span_text(timedelta(minutes=value))


def _span_text(span: timedelta) -> str:
    seconds = round(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _flag(value: bool | None) -> str | None:
    return None if value is None else ("yes" if value else "no")


def policies_table(view: dict[str, Any]) -> RenderableType:
    d = view["default"]
    rows = [["default", "(server)", _hours(d["idle_window_hours"]), d["idle_held"],
             _minutes(d["grace_minutes"]), _hours(d["end_warning_lead_hours"]), d["action"],
             _flag(d["enabled"]), _flag(d["dry_run"]), None]]
    rows += [[p["scope"], p["name"], _hours(p["idle_window_hours"]), p["idle_held"],
              _minutes(p["grace_minutes"]), _hours(p["end_warning_lead_hours"]), p["action"],
              _flag(p["enabled"]), _flag(p["dry_run"]),
              f"{when(p['updated_at'])} by {p['updated_by']}"] for p in view["items"]]
    return table(["scope", "name", "idle window", "idle-held", "grace", "end warning",
                  "action", "enabled", "dry run", "updated"], rows,
                 caption="blank: not set here (the project's policy wins over its "
                         "environment's, which wins over the server's default)")


@policy.command("set")
def set_policy(
    project: Project = None, environment: Environment = None,
    idle_window: Annotated[str | None, typer.Option(
        "--idle-window", help="Idle this long before a warning: 4h, 90m.")] = None,
    grace: Annotated[str | None, typer.Option(
        "--grace", help="From the warning to the action: 1h, 30m, 0.")] = None,
    end_warning: Annotated[str | None, typer.Option(
        "--end-warning", help="Warn this long before an allocation's end: 24h (0: never).")
    ] = None,
    action: Annotated[ReclaimAction | None, typer.Option(
        "--action", help="When the grace period ends: release, shrink or notify.")] = None,
    idle_held: Annotated[IdleHeld | None, typer.Option(
        "--idle-held", help="Idle-held units (memory held, no compute): reclaim or spare.")
    ] = None,
    enabled: Annotated[bool | None, typer.Option(
        "--enabled/--disabled", help="Reclaim here at all.")] = None,
    dry_run: Annotated[bool | None, typer.Option(
        "--dry-run/--for-real", help="Only record what would be done.")] = None,
    unset: Annotated[list[str] | None, typer.Option(
        "--unset", help=f"Clear a field (the next scope decides it): {', '.join(FIELDS)}.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Set fields of an environment's or a project's policy; the others keep their value."""
    scope, name = _scope(project, environment)
    for field in unset or []:
        if field not in FIELDS:
            raise typer.BadParameter(f"--unset {field}: not a field; one of {', '.join(FIELDS)}")
    payload = body(idle_window_hours=span_of("--idle-window", idle_window, 3600),
                   grace_minutes=span_of("--grace", grace, 60),
                   end_warning_lead_hours=span_of("--end-warning", end_warning, 3600),
                   action=action, idle_held=idle_held, enabled=enabled, dry_run=dry_run,
                   unset=unset or None)
    if not payload:
        raise typer.BadParameter("nothing to set: give a field (see --help)")
    with connect() as api:
        row = api.put(api_path("reclaim", "policies", scope.value, name), payload)
    if as_json:
        print_json(row)
    else:
        done(f"{scope.value} {name}: reclamation policy set")


@policy.command("ls")
def list_policies(as_json: JsonFlag = False) -> None:
    """The server's default and every environment's and project's policy."""
    with connect() as api:
        view = api.get(api_path("reclaim", "policies"))
    emit(view, as_json, policies_table)


@policy.command("rm")
def remove_policy(project: Project = None, environment: Environment = None) -> None:
    """Remove an environment's or a project's policy: the next scope decides again."""
    scope, name = _scope(project, environment)
    with connect() as api:
        api.delete(api_path("reclaim", "policies", scope.value, name))
    done(f"{scope.value} {name}: reclamation policy removed")


def steps_table(view: dict[str, Any]) -> RenderableType:
    return table(["allocation", "project", "environment", "step", "action", "units", "idle",
                  "deadline", "summary"],
                 [[s["allocation"], s["project"], s["environment"],
                   s["step"] + (" (dry run)" if s["dry_run"] else ""), s["action"], s["units"],
                   s["idle_units"], when(s["deadline_at"]), s["summary"]]
                  for s in view["steps"]])


@app.command("run")
def run_round(dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what a round would do now; change nothing.")] = False,
              as_json: JsonFlag = False) -> None:
    """Run a reclamation round now (the server runs one every `reclaim_interval_s`)."""
    with connect() as api:
        view = api.post(api_path("reclaim", "run") + ("?dry_run=true" if dry_run else ""))
    if not as_json and not view["steps"] and not view["ending_warned"]:
        note("nothing to do: no idle allocation to warn or act on")
        return
    emit(view, as_json, steps_table)
    if not as_json and view["ending_warned"]:
        note(f"warned of their end: {', '.join(view['ending_warned'])}")


@app.command("warnings")
def list_warnings(open_only: Annotated[bool, typer.Option(
        "--open", help="Only idle warnings still awaiting their deadline.")] = False,
                  allocation: Annotated[str | None, typer.Option(
                      "--allocation", help="Only this allocation's, e.g. GR-1042.")] = None,
                  as_json: JsonFlag = False) -> None:
    """Warnings and how they ended, newest first."""
    with connect() as api:
        found = api.get(api_path("reclaim", "warnings"),
                        query(open=open_only or None, allocation=allocation))
    if not as_json and not found:
        note("no warnings")
        return
    emit(found, as_json, lambda ws: table(
        ["allocation", "kind", "project", "owner", "warned", "deadline", "outcome", "taken",
         "summary"],
        [[w["allocation"], w["kind"] + (" (dry run)" if w["dry_run"] else ""), w["project"],
          w["owner"], when(w["warned_at"]), when(w["deadline_at"]), w["outcome"] or "open",
          w["units_taken"], w["summary"]] for w in ws]))


@app.command("exemptions")
def list_exemptions(expired: Annotated[bool, typer.Option(
        "--expired", help="The ended ones too.")] = False, as_json: JsonFlag = False) -> None:
    """Exemptions granted and asked for, newest first."""
    with connect() as api:
        found = api.get(api_path("reclaim", "exemptions"), query(expired=expired or None))
    if not as_json and not found:
        note("no exemptions")
        return
    emit(found, as_json, lambda es: table(
        ["allocation", "project", "state", "until", "reason", "asked by", "granted by"],
        [[e["allocation"], e["project"], e["state"], when(e["expires_at"]), e["reason"],
          e["asked_by"], e["granted_by"]] for e in es]))


def report_table(view: dict[str, Any]) -> RenderableType:
    columns = ("warned", "released", "shrunk", "notified", "saved_by_use", "exempted",
               "would_act", "units_taken")
    rows = [[r["project"], r["environment"], *(r[c] for c in columns),
             f"{r['gpu_hours_back']:.1f}"] for r in [*view["rows"], view["total"]]]
    rows[-1][0] = "total"
    return table(["project", "environment", "warned", "released", "shrunk", "notified",
                  "saved by use", "exempted", "would act (dry)", "units back",
                  "GPU-hours back"], rows,
                 title=f"reclamation {when(view['since'])} – {when(view['until'])}")


@app.command("report")
def report(window: Annotated[str, typer.Option("--window", help="The window: 7d, 30d.")] = "30d",
           project: Annotated[str | None, typer.Option("--project", "-p")] = None,
           as_json: JsonFlag = False) -> None:
    """What came back over the window (GPU-hours, per project and environment), what was
    warned but saved by use, and what was exempted."""
    with connect() as api:
        view = api.get(api_path("reclaim", "report"), query(window=window, project=project))
    emit(view, as_json, report_table)
