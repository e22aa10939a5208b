"""`gpufleet request …`: ask for GPUs, decide, and follow a request to its release.

A request is a ticket (`GR-1042`) for whole GPUs, MIG instances (`--mig`) or fractions of shared
GPUs (`--fraction`); docs/design.md, "Concepts" has its states. Whatever leaves a request active
prints the `export` lines a workload uses (`GPUFLEET_ALLOCATION`, `CUDA_VISIBLE_DEVICES`,
`GPUFLEET_NODE`) on stdout and its human lines on stderr, so `request approve` and an auto-approved
`request create` answer alike; with `--exports` only the export lines go to stdout (`eval
"$(gpufleet request approve GR-1042 --exports)"`). Exports naming MIG instances not created yet are
never printed (`request wait --exports` waits for them).
"""

import shlex
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import (
    AllPages,
    CodeOnly,
    JsonFlag,
    Limit,
    Reason,
    body,
    only_one_output,
    query,
    show_listing,
)
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import (
    Group,
    RenderableType,
    Text,
    done,
    emit,
    fields,
    note,
    print_json,
    table,
    when,
)
from gpufleet.cli.views import quota_table
from gpufleet.domain.requests import FlavourKind, RequestState
from gpufleet.text_limits import MAX_DURATION_DAYS

app = typer.Typer(help="GPU requests: ask, approve, use, release.", no_args_is_help=True)

Code = Annotated[str, typer.Argument(help="The request's code, e.g. GR-1042.")]
RequiredReason = Annotated[str, typer.Option("--reason", help="Why; kept in the audit log.")]
Days = Annotated[float | None, typer.Option("--days", help="Hold it this many days.")]
Hours = Annotated[float | None, typer.Option("--hours", help="Hold it this many hours.")]
Until = Annotated[str | None, typer.Option(
    "--until", help="Hold it until this ISO time (without a zone: UTC).")]
ExportsOnly = Annotated[bool, typer.Option(
    "--exports", help="Only the export lines on stdout (status on stderr), for "
                      "`eval \"$(gpufleet request … --exports)\"`.")]


def instant(text: str | None) -> str | None:
    """An ISO time for the API; one typed without a zone is taken as UTC (as tables show).
    Text that is no ISO time goes as typed, for the server to refuse in its own words."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _one_length(days: float | None, hours: float | None, until: str | None) -> float | None:
    """The hours --days or --hours give (None: neither); one at most, each a positive
    number no longer than the server accepts (`inf`, `1e400` and `nan` parse as floats)."""
    if sum(value is not None for value in (days, hours, until)) > 1:
        raise typer.BadParameter("give one of --days, --hours and --until")
    for flag, value, most in (("--days", days, MAX_DURATION_DAYS),
                              ("--hours", hours, MAX_DURATION_DAYS * 24)):
        if value is not None and not 0 < value <= most:  # False for nan
            raise typer.BadParameter(f"{flag} must be a number above 0 and at most {most:g}, "
                                     f"not {value:g}")
    return days * 24 if days is not None else hours


def _count(gpus: int | None, count: int | None) -> int:
    if gpus is not None and count is not None and gpus != count:
        raise typer.BadParameter(f"--gpus {gpus} and --count {count} disagree; give one")
    chosen = count if count is not None else gpus
    if chosen is None:
        raise typer.BadParameter("how many? give --gpus N (whole GPUs) or --count N "
                                 "(MIG instances or fractions)")
    return chosen


# --- how a request reads -------------------------------------------------------------------
def flavour_text(request: dict[str, Any]) -> str:
    """`H100-80GB`, `any model`, `H100-80GB 1g.10gb`, `any model shared 0.5`."""
    models = ",".join(request["models"]) if request["models"] else "any model"
    if request["kind"] == FlavourKind.MIG:
        return f"{models} {request['mig_profile']}"
    if request["kind"] == FlavourKind.SHARED:
        return f"{models} shared {request['milli'] / 1000:g}"
    return models


def _duration(seconds: int | None) -> str | None:
    if not seconds:
        return None
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    return f"{seconds / 3600:g}h"


def _length(request: dict[str, Any]) -> str | None:
    return when(request["ends_at"]) if request["ends_at"] else _duration(request["duration_s"])


WAITING = (RequestState.PENDING, RequestState.APPROVED)


def _wait(request: dict[str, Any]) -> str | None:
    """What a pending or approved request waits for (nothing else waits)."""
    if request["state"] not in WAITING or not request["wait_code"]:
        return None
    return f"{request['wait_code']}: {request['wait_message']}"


def _degraded(request: dict[str, Any]) -> str | None:
    """An active allocation that lost units to a retirement or quarantine says which."""
    if request["state"] != "active" or request["wait_code"] != "units_lost":
        return None
    return request["wait_message"]


def requests_table(items: list[dict[str, Any]]) -> RenderableType:
    return table(["code", "project", "state", "count", "flavour", "by", "created", "ends",
                  "waiting on"],
                 [[r["code"], r["project"], r["state"], r["count"], flavour_text(r),
                   r["requested_by"], when(r["created_at"]), _length(r),
                   r["wait_code"] if r["state"] in WAITING else None]
                  for r in items])


def _mig_text(unit: dict[str, Any]) -> str | None:
    if unit["mig_profile"] is None:
        return None
    return f"{unit['mig_profile']}@{unit['mig_start']}"


def units_table(units: list[dict[str, Any]]) -> RenderableType:
    return table(["node", "idx", "uuid", "model", "kind", "MIG", "milli", "since", "until"],
                 [[u["node"], u["gpu_index"], u["gpu_uuid"], u["model"], u["kind"],
                   _mig_text(u), u["milli"], when(u["started_at"]), when(u["ended_at"])]
                  for u in units], title="units")


def export_lines(exports: dict[str, str]) -> list[str]:
    return [f"export {name}={shlex.quote(value)}" for name, value in exports.items()]


def request_detail(request: dict[str, Any]) -> RenderableType:
    about = fields({
        "code": request["code"], "project": request["project"], "state": request["state"],
        "waiting on": _wait(request), "degraded": _degraded(request),
        "count": request["count"],
        "flavour": flavour_text(request),
        "CPU cores / unit": f"{request['cpu_milli_per_unit'] / 1000:g}",
        "memory GiB / unit": f"{request['memory_mib_per_unit'] / 1024:g}",
        "same node": request["same_node"], "NVLink": request["nvlink"],
        "environment": request["environment"], "starts": when(request["starts_at"]),
        "ends": when(request["ends_at"]), "duration": _duration(request["duration_s"]),
        "reason": request["justification"], "pool": request["pool"],
        "requested by": request["requested_by"], "created": when(request["created_at"]),
        "decided by": request["decided_by"], "decided": when(request["decided_at"]),
        "needs an operator": request["needs_operator"],
        "activated": when(request["activated_at"]), "closed": when(request["closed_at"]),
    }, title=f"request {request['code']}")
    if not request["units"]:
        return about
    return Group(about, "", units_table(request["units"]))


def _held(units: list[dict[str, Any]]) -> str:
    """`8 × H100-80GB`, `4 × H100-80GB 1g.10gb`, `2 × L40S-48GB shared 0.5`."""
    kinds = Counter(
        u["model"] + (f" {u['mig_profile']}" if u["mig_profile"] else "")
        + (f" shared {u['milli'] / 1000:g}" if u["kind"] == FlavourKind.SHARED else "")
        for u in units if u["ended_at"] is None)
    return ", ".join(f"{n} × {what}" for what, n in sorted(kinds.items()))


PENDING_DEVICE = "pending:"  # how the API names a MIG instance the node has not created yet


def usable_exports(request: dict[str, Any]) -> bool:
    """Whether the request's exports can be handed to a workload now: every device they
    name exists. A planned MIG instance has no UUID until its node creates it, and a CUDA
    program given an unset or unusable CUDA_VISIBLE_DEVICES may run on any GPU."""
    devices = request["exports"].get("CUDA_VISIBLE_DEVICES", "")
    return bool(request["exports"]) and PENDING_DEVICE not in devices


def print_outcome(request: dict[str, Any], exports_only: bool = False) -> None:
    """`GR-1042 pending`; when it holds units, what it holds and the export lines; when it
    waits approved, what for. With `exports_only` (--exports) stdout gets the export lines
    and nothing else, so `eval "$(gpufleet request approve GR-1042 --exports)"` sets them;
    the status goes to stderr. Exports naming a MIG instance not created yet are never
    printed: `request wait --exports` prints them once they are usable."""
    code, state = request["code"], request["state"]
    say = note if exports_only else done
    if state == RequestState.ACTIVE and request["exports"]:
        say(f"{code} active: {_held(request['units'])} on "
            f"{request['exports'].get('GPUFLEET_NODE', '-')}")
        if usable_exports(request):
            print_exports(request)
        else:
            note(_pending_note(code))
    elif state == RequestState.APPROVED and request["wait_code"]:
        say(f"{code} approved, waiting: {_wait(request)}")
    else:
        say(f"{code} {state}")


def _pending_note(code: str) -> str:
    return (f"its MIG instances are planned, not created yet: no exports until the node has "
            f"made them; `gpufleet request wait {code} --exports` waits and prints them")


def print_exports(request: dict[str, Any]) -> None:
    for line in export_lines(request["exports"]):
        done(line)


def _act(code: str, action: str, as_json: bool, payload: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    with connect() as api:
        request = api.post(api_path("requests", code, action), payload)
    if as_json:
        print_json(request)
    return request


# --- commands --------------------------------------------------------------------------------
@app.command("create")
def create(
    project: Annotated[str, typer.Option("--project", "-p", help="The project it is for.")],
    reason: RequiredReason,
    gpus: Annotated[int | None, typer.Option(
        "--gpus", help="Whole GPUs (with --mig or --fraction: the same as --count).")] = None,
    count: Annotated[int | None, typer.Option(
        "--count", help="Units: MIG instances with --mig, fractions with --fraction.")] = None,
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="Acceptable GPU model (e.g. H100-80GB); repeat for several; "
                              "none: any model.")] = None,
    mig: Annotated[str | None, typer.Option(
        "--mig", help="A MIG profile per unit, e.g. 1g.10gb.")] = None,
    fraction: Annotated[float | None, typer.Option(
        "--fraction", help="A share of one shared GPU per unit, e.g. 0.5.")] = None,
    same_node: Annotated[bool, typer.Option(
        "--same-node", help="All units on one node.")] = False,
    nvlink: Annotated[bool, typer.Option(
        "--nvlink", help="All GPUs NVLink-connected (implies --same-node).")] = False,
    environment: Annotated[str | None, typer.Option(
        "--env", help="Only in this environment.")] = None,
    cpu: Annotated[float | None, typer.Option(
        "--cpu", help="Host CPU cores per unit.")] = None,
    memory: Annotated[float | None, typer.Option(
        "--memory", help="Host memory GiB per unit.")] = None,
    days: Days = None,
    hours: Hours = None,
    until: Until = None,
    start: Annotated[str | None, typer.Option(
        "--start", help="Reserve from this ISO time (without a zone: UTC).")] = None,
    exports: ExportsOnly = False,
    as_json: JsonFlag = False,
    code_only: CodeOnly = False,
) -> None:
    """Ask for GPUs; prints its code and state (and the exports when granted at once)."""
    only_one_output(quiet=code_only, json=as_json, exports=exports)
    duration = _one_length(days, hours, until)
    with connect() as api:
        request = api.post(api_path("requests"), body(
            project=project, count=_count(gpus, count), models=model or None,
            mig_profile=mig, fraction=fraction, cpu_cores_per_unit=cpu,
            memory_gib_per_unit=memory, same_node=same_node or None, nvlink=nvlink or None,
            environment=environment, starts_at=instant(start), ends_at=instant(until),
            duration_hours=duration, reason=reason))
    if as_json:
        print_json(request)
    elif code_only:
        done(request["code"])
    else:
        print_outcome(request, exports_only=exports)


@app.command("ls")
def list_requests(
    state: Annotated[RequestState | None, typer.Option("--state", "-s",
                                                       help="Only in this state.")] = None,
    project: Annotated[str | None, typer.Option("--project", "-p",
                                                help="Only of this project.")] = None,
    limit: Limit = None,
    all_pages: AllPages = False,
    as_json: JsonFlag = False,
) -> None:
    """List requests, newest first (members see their own projects')."""
    show_listing(api_path("requests"), query(state=state, project=project, limit=limit),
                 all_pages=all_pages, as_json=as_json, render=requests_table, what="requests")


@app.command("show")
def show_request(code: Code, as_json: JsonFlag = False) -> None:
    """One request: what it asks for, its units (past and present) and its exports."""
    with connect() as api:
        request = api.get(api_path("requests", code))
    emit(request, as_json, request_detail)
    if as_json or not request["exports"]:
        return
    if usable_exports(request):
        done("")  # plain lines, never wrapped by the table's width: they are for a shell
        print_exports(request)
    else:
        note(_pending_note(code))


WAIT_POLL_S = 2.0


@app.command("wait")
def wait(code: Code,
         exports: ExportsOnly = False,
         timeout_s: Annotated[float, typer.Option(
             "--timeout-s", min=0, help="Give up after this many seconds (0: never).")
         ] = 600.0) -> None:
    """Wait until a request holds usable units — granted, its MIG instances created — then
    print its exports; exit 1 if it ends first or the timeout passes."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    with connect() as api:
        while True:
            request = api.get(api_path("requests", code))
            state = request["state"]
            if state == RequestState.ACTIVE and usable_exports(request):
                break
            if RequestState(state).is_final:
                raise CliError(f"{code} is {state}: it will hold no units")
            if deadline is not None and time.monotonic() >= deadline:
                waiting = ("active, its MIG instances not created yet"
                           if state == RequestState.ACTIVE else f"still {state}")
                raise CliError(f"{code} {waiting} after {timeout_s:g} s "
                               f"(`gpufleet request why {code}`)")
            time.sleep(WAIT_POLL_S)
    print_outcome(request, exports_only=exports)


def _why(why: dict[str, Any]) -> RenderableType:
    position = why["queue_position"]
    queue = (f"queue position: {position} of {why['queue_length']} {why['state']}"
             if position and f"position {position} of" not in why["summary"] else None)
    verdicts = table(["rule", "outcome", "code", "message"],
                     [[v["rule"], v["outcome"], v["code"], v["message"]]
                      for v in why["verdicts"]], title="rules")
    parts: list[RenderableType] = [Text(why["summary"])]
    if queue:
        parts.append(Text(queue))
    parts += ["", verdicts]
    if why["quotas"]:
        parts += ["", quota_table(why["quotas"], title="quotas")]
    return Group(*parts)


@app.command("why")
def why(code: Code, as_json: JsonFlag = False) -> None:
    """Why a request waits: each admission rule's verdict, its queue place, its quotas."""
    with connect() as api:
        data = api.get(api_path("requests", code, "why"))
    emit(data, as_json, _why)


@app.command("approve")
def approve(code: Code, reason: Reason = None, exports: ExportsOnly = False,
            as_json: JsonFlag = False) -> None:
    """Approve a pending request; prints its units and exports, or what it waits for."""
    request = _act(code, "approve", as_json, body(reason=reason))
    if not as_json:
        print_outcome(request, exports_only=exports)


@app.command("reject")
def reject(code: Code, reason: RequiredReason, as_json: JsonFlag = False) -> None:
    """Reject a pending request."""
    request = _act(code, "reject", as_json, body(reason=reason))
    if not as_json:
        done(f"{request['code']} {request['state']}")


@app.command("cancel")
def cancel(code: Code, reason: Reason = None, as_json: JsonFlag = False) -> None:
    """Withdraw a request that holds nothing yet (pending or approved)."""
    request = _act(code, "cancel", as_json, body(reason=reason))
    if not as_json:
        done(f"{request['code']} {request['state']}")


@app.command("release")
def release(code: Code, reason: Reason = None, as_json: JsonFlag = False) -> None:
    """Give an active allocation's units back (its bindings close, its labels go)."""
    request = _act(code, "release", as_json, body(reason=reason))
    if not as_json:
        done(f"{request['code']} {request['state']}")


@app.command("extend")
def extend(code: Code, days: Days = None, hours: Hours = None, until: Until = None,
           reason: Reason = None, as_json: JsonFlag = False) -> None:
    """Move a request's end: --days / --hours later than now planned, or --until a time."""
    later = _one_length(days, hours, until)
    request = _act(code, "extend", as_json,
                   body(hours=later, ends_at=instant(until), reason=reason))
    if not as_json:
        done(f"{request['code']} now ends {when(request['ends_at'])}")


@app.command("exempt")
def exempt(code: Code, reason: RequiredReason,
           hours: Annotated[float | None, typer.Option(
               "--hours", help="Exempt it for this many hours.")] = None,
           until: Annotated[str | None, typer.Option(
               "--until", help="Exempt it until this ISO time (without a zone: UTC).")] = None,
           as_json: JsonFlag = False) -> None:
    """Keep an allocation from reclamation until a time. An operator's call grants it; an
    owner's is recorded as asked, and protects nothing until an operator grants it."""
    if (hours is None) == (until is None):
        raise typer.BadParameter("give one of --hours and --until")
    if hours is not None and not 0 < hours <= 24 * 90:  # False for nan
        raise typer.BadParameter(f"--hours must be above 0 and at most {24 * 90}, not {hours:g}")
    with connect() as api:
        row = api.post(api_path("requests", code, "exempt"),
                       body(reason=reason, hours=hours, until=instant(until)))
    if as_json:
        print_json(row)
    elif row["state"] == "granted":
        done(f"{code} is exempt from reclamation until {when(row['expires_at'])}")
    else:
        done(f"{code}: exemption asked for until {when(row['expires_at'])}; an operator "
             "grants it (until then it protects nothing)")


@app.command("history")
def history(code: Code, limit: Limit = None, all_pages: AllPages = False,
            as_json: JsonFlag = False) -> None:
    """Every transition of a request, oldest first: when, who, what, why."""
    show_listing(api_path("requests", code, "history"), query(limit=limit),
                 all_pages=all_pages, as_json=as_json, what="events", render=lambda es: table(
                     ["at", "actor", "action", "reason"],
                     [[when(e["at"]), e["actor"], e["action"], e["reason"]] for e in es]))
