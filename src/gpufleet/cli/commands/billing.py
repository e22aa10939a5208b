"""`gpufleet billing rates ls | set | end`: the rate card chargeback prices with
(docs/billing.md, "Rate cards, stored"); `gpufleet billing statement | export`: what it
comes to per project or roll-up (docs/billing.md, "Statements from the store").

Times are ISO 8601 with a zone (2026-12-01T00:00:00Z); the server names what is wrong with
one. A price is never edited: `set` from a time ends the open rate of that flavour and
environment there and adds the new one, so a statement for a past month still finds the
price in force then. Prices travel as decimal text, exactly as written.
"""

import json
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, body, query
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import RenderableType, done, emit, emit_done, note, table, when

app = typer.Typer(help="Chargeback: rate cards, statements and their export.",
                  no_args_is_help=True)
rates = typer.Typer(help="Rate cards: the price of a unit-hour per flavour and environment, "
                    "with its history.", no_args_is_help=True)
app.add_typer(rates, name="rates")

Flavour = Annotated[str | None, typer.Option(
    "--flavour", "-f", help="e.g. H100-80GB, H100-80GB/1g.10gb, L40S-48GB/shared.")]
Environment = Annotated[str | None, typer.Option(
    "--environment", "-e", help="An environment's name; left out: any environment.")]


def rates_table(found: list[dict[str, Any]]) -> RenderableType:
    return table(["id", "flavour", "environment", "price / unit-hour", "idle adj.", "from",
                  "to", "set by"],
                 [[r["id"], r["flavour"], r["environment"] or "any",
                   f"{r['price_per_unit_hour']} {r['currency']}",
                   _adjustment(r["idle_adjustment"]), when(r["effective_from"]),
                   when(r["effective_to"]) if r["effective_to"] else "open", r["created_by"]]
                  for r in found])


def _adjustment(fraction: str) -> str:
    """`0.25` → `+25%`, `-0.1` → `-10%`, `0` → `-`: a surcharge or discount on idle cost."""
    percent = Decimal(fraction) * 100
    if not percent:
        return "-"
    return f"{percent.normalize():+f}%"


@rates.command("ls")
def list_rates(flavour: Flavour = None,
               environment: Annotated[str | None, typer.Option(
                   "--environment", "-e",
                   help="Rates that may price there: its own and those for any.")] = None,
               at: Annotated[str | None, typer.Option(
                   "--at", help="Only rates in force then (a time with its zone).")] = None,
               as_json: JsonFlag = False) -> None:
    """The rate card, history included, oldest first per flavour."""
    params = query(flavour=flavour, environment=environment,
                   at=at)
    with connect() as api:
        found = api.get(api_path("billing", "rates"), params)
    if not found and not as_json:
        note("no rates match these filters" if params else
             "no rates yet: `gpufleet billing rates set H100-80GB 2.45 --currency EUR`")
        return
    emit(found, as_json, rates_table)


@rates.command("set")
def set_rate(
    flavour: Annotated[str, typer.Argument(help="e.g. H100-80GB, H100-80GB/1g.10gb.")],
    price: Annotated[str, typer.Argument(help="Per unit-hour, as a decimal: 2.45.")],
    currency: Annotated[str, typer.Option("--currency", "-c", help="ISO 4217, e.g. EUR.")],
    environment: Environment = None,
    effective_from: Annotated[str | None, typer.Option(
        "--from", help="From when (a time with its zone); default now.")] = None,
    effective_to: Annotated[str | None, typer.Option(
        "--to", help="Until when (a time with its zone); default open.")] = None,
    idle_adjustment: Annotated[str | None, typer.Option(
        "--idle-adjustment", help="A surcharge (0.5: +50 %) or discount (-0.2) on the cost "
        "of idle GPU-hours this rate prices; default 0.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Price a flavour from a time on (administrators); the open rate ends then."""
    with connect() as api:
        rate = api.post(api_path("billing", "rates"), body(
            flavour=flavour, price_per_unit_hour=price, currency=currency,
            environment=environment,
            effective_from=effective_from,
            effective_to=effective_to,
            idle_adjustment=idle_adjustment))
    emit_done(rate, as_json,
              f"rate {rate['id']}: {rate['flavour']} in {rate['environment'] or 'any environment'}"
              f" at {rate['price_per_unit_hour']} {rate['currency']} per unit-hour from "
              f"{when(rate['effective_from'])}")


@rates.command("end")
def end_rate(
    rate_id: Annotated[int, typer.Argument(help="The rate's id (`billing rates ls`).")],
    at: Annotated[str | None, typer.Option(
        "--at", help="When it stops (a time with its zone); default now.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """End an open rate (administrators): from then the flavour is unpriced there unless
    another rate covers it."""
    with connect() as api:
        rate = api.post(api_path("billing", "rates", rate_id, "end"),
                        body(at=at))
    emit_done(rate, as_json, f"rate {rate['id']} ({rate['flavour']}) ends at "
                             f"{when(rate['effective_to'])}")


# --- statements (docs/billing.md, "Statements from the store") -----------------------------

Month = Annotated[str | None, typer.Option(
    "--month", "-m", help="A calendar month (UTC), YYYY-MM; or give --start (and --end). "
    "Neither: this month.")]
Start = Annotated[str | None, typer.Option("--start", help="Window start (a time with its zone).")]
End = Annotated[str | None, typer.Option(
    "--end", help="Window end, exclusive (a time with its zone); cut at now; default now.")]
Project = Annotated[str | None, typer.Option("--project", "-p",
                                             help="Only this project's statement.")]
By = Annotated[str | None, typer.Option(
    "--by", help="Roll up by project (default), organisation, department or cost_centre.")]
GroupBy = Annotated[str | None, typer.Option(
    "--group", "-g", help="Break each row down by model, profile, environment or flavour.")]


def _statements(month: str | None, start: str | None, end: str | None, project: str | None,
                by: str | None, group: str | None) -> dict[str, Any]:
    with connect() as api:
        return api.get(api_path("billing", "statements"), query(
            month=month, start=start, end=end, project=project, by=by, group=group))


def _hours(value: float) -> str:
    return f"{value:,.2f}"


def _money(value: str | None) -> str:
    return "-" if value is None else value


def statement_table(found: dict[str, Any]) -> RenderableType:
    grouped = found["group"] is not None
    lines = []
    for row in found["rows"]:
        parts = [(g["group"], g["totals"]) for g in row["groups"]] if grouped else \
            [(None, row["totals"])]
        for group, t in parts:
            efficiency = t["efficiency_percent"]
            lines.append([row["key"] or "(none)", *([group or "-"] if grouped else []),
                          _hours(t["allocated_gpu_hours"]), _hours(t["reserved_gpu_hours"]),
                          _hours(t["charged_gpu_hours"]), _hours(t["active_gpu_hours"]),
                          _hours(t["idle_gpu_hours"]), _hours(t["unknown_gpu_hours"]),
                          "-" if efficiency is None else f"{efficiency:.0f}%",
                          _money(t["cost"]), _money(t["idle_cost"]), _money(t["total_cost"])])
    total = found["total"]
    currency = found["currency"] or "no rate card: unpriced"
    caption = (f"{when(found['window_start'])} to {when(found['window_end'])}, {currency}; "
               f"total {_money(total['total_cost'])}, idle {_money(total['idle_cost'])}")
    if total["unpriced_gpu_hours"]:
        caption += f"; {_hours(total['unpriced_gpu_hours'])} GPU-h unpriced"
    return table([found["by"], *([found["group"]] if grouped else []), "allocated h",
                  "reserved h", "charged h", "active h", "idle h", "unknown h", "efficiency",
                  "cost", "idle cost", "total"], lines, caption=caption)


@app.command("statement")
def statement(month: Month = None, start: Start = None, end: End = None,
              project: Project = None, by: By = None, group: GroupBy = None,
              as_json: JsonFlag = False) -> None:
    """What each project's GPUs cost over a month or window: GPU-hours allocated, reserved,
    charged, active, idle and unknown, and their cost (members: their own projects)."""
    emit(_statements(month, start, end, project, by, group), as_json, statement_table)


@app.command("export")
def export(month: Month = None, start: Start = None, end: End = None,
           project: Project = None, by: By = None, group: GroupBy = None,
           output_format: Annotated[str, typer.Option(
               "--format", "-f", help="csv or json.")] = "csv",
           output: Annotated[Path | None, typer.Option(
               "--output", "-o", help="Write to this file instead of stdout.")] = None) -> None:
    """A statement as CSV (one line per row, or per row and group) or JSON, for a
    spreadsheet or an invoice run: the API's figures, money as decimal text."""
    if output_format not in ("csv", "json"):
        raise CliError(f"--format must be csv or json, not '{output_format}'")
    found = _statements(month, start, end, project, by, group)
    if output_format == "json":
        text = json.dumps(found, indent=2) + "\n"
    else:
        from gpufleet.wire.billing import StatementsView, statements_csv

        text = statements_csv(StatementsView.model_validate(found))
    if output is None:
        typer.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    done(f"wrote {output} ({len(found['rows'])} rows, {found['currency'] or 'unpriced'})")
