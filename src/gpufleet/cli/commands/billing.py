"""`gpufleet billing rates ls | set | end`: the rate card chargeback prices with
(docs/billing.md, "Rate cards, stored").

Times are ISO 8601 with a zone (2026-12-01T00:00:00Z); the server names what is wrong with
one. A price is never edited: `set` from a time ends the open rate of that flavour and
environment there and adds the new one, so a statement for a past month still finds the
price in force then. Prices travel as decimal text, exactly as written.
"""

from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import JsonFlag, body, query
from gpufleet.cli.output import RenderableType, emit, emit_done, note, table, when

app = typer.Typer(help="Chargeback: rate cards.", no_args_is_help=True)
rates = typer.Typer(help="Rate cards: the price of a unit-hour per flavour and environment, "
                    "with its history.", no_args_is_help=True)
app.add_typer(rates, name="rates")

Flavour = Annotated[str | None, typer.Option(
    "--flavour", "-f", help="e.g. H100-80GB, H100-80GB/1g.10gb, L40S-48GB/shared.")]
Environment = Annotated[str | None, typer.Option(
    "--environment", "-e", help="An environment's name; left out: any environment.")]


def rates_table(found: list[dict[str, Any]]) -> RenderableType:
    return table(["id", "flavour", "environment", "price / unit-hour", "from", "to", "set by"],
                 [[r["id"], r["flavour"], r["environment"] or "any",
                   f"{r['price_per_unit_hour']} {r['currency']}", when(r["effective_from"]),
                   when(r["effective_to"]) if r["effective_to"] else "open", r["created_by"]]
                  for r in found])


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
    as_json: JsonFlag = False,
) -> None:
    """Price a flavour from a time on (administrators); the open rate ends then."""
    with connect() as api:
        rate = api.post(api_path("billing", "rates"), body(
            flavour=flavour, price_per_unit_hour=price, currency=currency,
            environment=environment,
            effective_from=effective_from,
            effective_to=effective_to))
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
