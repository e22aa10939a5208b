"""How the CLI prints: Rich tables for people, the API's own JSON for scripts.

With `--json` a command writes exactly `json.dumps(<API reply>, indent=2)` to stdout and
nothing else there; hints and warnings go to stderr so they never corrupt a pipe.
Timestamps are shown in UTC as `2026-11-02 09:00Z` and sizes in GiB, whatever the
machine's locale or time zone, so two operators reading the same table see the same text.

Rich is imported by the functions that draw, not by this module: a `--json` command never
loads it (~40 ms of a command's start-up; BENCHMARKS.md, "CLI start-up").
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

GIB = 1024**3
PIPE_WIDTH_COLUMNS = 200  # piped tables are not wrapped at 80 columns
UNBOUNDED_COLUMNS = 10_000  # measuring a table's own width
EMPTY = "-"
# Identifiers a table prints whole however narrow the terminal: GPU and MIG UUIDs.
WHOLE_IDS = ("GPU-", "MIG-")


# Rich's own names, loaded on first use, for the command modules: they build renderables
# with these and still answer `--json` without loading Rich. `RenderableType` is for
# annotations only.
RenderableType = Any


def Group(*renderables: Any) -> Any:
    from rich.console import Group as RichGroup

    return RichGroup(*renderables)


def Text(text: str = "", **options: Any) -> Any:
    from rich.text import Text as RichText

    return RichText(text, **options)


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(file=stream, width=PIPE_WIDTH_COLUMNS if wide else None, soft_wrap=False)


def show(*renderables: RenderableType) -> None:
    """Print for a person. A table wider than the terminal is printed at its own width (the
    terminal wraps its lines, as `kubectl get` does) rather than squeezed into cells cut
    to '…': a cut UUID or name cannot be pasted into the next command."""
    from rich.console import Console
    from rich.console import Group as RichGroup
    from rich.measure import Measurement
    from rich.table import Table

    console = _console()
    for renderable in renderables:
        if isinstance(renderable, Table | RichGroup):
            unbounded = console.options.update(max_width=UNBOUNDED_COLUMNS)
            needed = Measurement.get(console, unbounded, renderable).maximum
            if needed > console.width:
                Console(file=console.file, width=needed, soft_wrap=False).print(renderable)
                continue
        console.print(renderable)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def emit(data: Any, as_json: bool, render: Callable[[Any], RenderableType]) -> None:
    """The raw API JSON with `--json`, otherwise its table."""
    if as_json:
        print_json(data)
    else:
        show(render(data))


def done(message: str) -> None:
    """Say what a command changed (stdout: it is the command's result)."""
    typer.echo(message)


def emit_done(data: Any, as_json: bool, message: str) -> None:
    """The raw API JSON with `--json`, otherwise one line saying what changed."""
    if as_json:
        print_json(data)
    else:
        done(message)


def note(message: str) -> None:
    """A hint beside the result (stderr: keeps stdout clean for pipes)."""
    typer.echo(message, err=True)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *,
          title: str | None = None, caption: str | None = None) -> Table:
    """A listing: a header rule and no vertical bars, so `awk` / `grep` read it as well."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    result = Table(*columns, title=title, caption=caption, title_justify="left",
                   caption_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                   pad_edge=False)
    widest_id = [0] * len(columns)
    for row in rows:
        cells = [cell_text(value) for value in row]
        for n, text in enumerate(cells):
            if text.startswith(WHOLE_IDS):
                widest_id[n] = max(widest_id[n], len(text))
        result.add_row(*(Text(text) for text in cells))
    for column, width in zip(result.columns, widest_id, strict=True):
        if width:  # a UUID is pasted into the next command: never cut, never wrapped
            column.min_width, column.no_wrap = width, True
    return result


def fields(pairs: Mapping[str, Any], *, title: str | None = None) -> Table:
    """A two-column `field  value` table for one object.

    Cells are plain `Text`, never Rich markup: a label or reason such as `[red]` is data.
    """
    from rich.table import Table
    from rich.text import Text

    result = Table.grid(padding=(0, 2))
    result.title = title
    result.title_justify = "left"
    result.add_column(style="bold")
    result.add_column()
    for name, value in pairs.items():
        result.add_row(name, Text(cell_text(value)))
    return result


def cell_text(value: Any) -> str:
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def gib(memory_bytes: int | None) -> str:
    """Bytes as GiB: whole numbers bare (`80`), others to one decimal (`79.6`)."""
    if memory_bytes is None:
        return EMPTY
    value = memory_bytes / GIB
    return f"{value:.0f}" if value == round(value) else f"{value:.1f}"


def when(timestamp: str | None) -> str:
    """An API timestamp as `2026-11-02 09:00Z` (naive ones are taken as UTC)."""
    if not timestamp:
        return EMPTY
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def labels_text(labels: Mapping[str, str] | None) -> str:
    if not labels:
        return EMPTY
    # Pairs apart by spaces: a value held by several allocations is itself comma-separated.
    return " ".join(f"{key}={value}" for key, value in sorted(labels.items()))
