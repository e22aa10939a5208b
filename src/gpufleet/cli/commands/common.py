"""Options several command groups share, and the query-string builder.

Option types are declared once so `--environment` or `--json` reads the same in
`fleet ls` and `node ls`. Choices come from the domain vocabulary (`GpuStatus`, …), so the
CLI offers exactly the words the API accepts.
"""

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.cli.client import Params, connect
from gpufleet.cli.errors import CliError
from gpufleet.cli.output import done, emit, note
from gpufleet.domain.inventory import GpuHealth

DocsCheck = Annotated[bool, typer.Option(
    "--check", help="Fail when the file differs from what it is generated from, instead of "
    "writing it.")]
DocsOutput = Annotated[Path, typer.Option("--output", "-o",
                                          help="The Markdown file to write or check.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON reply instead.")]
CodeOnly = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print only its code, for scripts: GR=$(gpufleet request create … -q).")]
AllPages = Annotated[bool, typer.Option("--all", help="Follow every page, not just the first.")]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="Items per page.")]
Reason = Annotated[str | None, typer.Option("--reason", help="Why; kept in the audit log.")]
Environments = Annotated[list[str] | None, typer.Option(
    "--environment", "-e", help="Only this environment; repeat for several.")]
Models = Annotated[list[str] | None, typer.Option(
    "--model", "-m", help="Only this GPU model key (e.g. H100-80GB); repeat for several.")]
Healths = Annotated[list[GpuHealth] | None, typer.Option(
    "--health", help="Only this GPU health; repeat for several.")]
Labels = Annotated[list[str] | None, typer.Option(
    "--label", "-l", help="Only with label key=value; repeat to require several.")]


def query(**values: Any) -> Params:
    """Query parameters from keyword values: lists repeat, None and empty lists vanish."""
    params: Params = []
    for name, value in values.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is None:
                continue
            if isinstance(item, Enum):
                item = item.value
            elif isinstance(item, bool):
                item = "true" if item else "false"
            params.append((name, str(item)))
    return params


def body(**values: Any) -> dict[str, Any]:
    """A request body without the options that were not given (the server's defaults win)."""
    return {name: value.value if isinstance(value, Enum) else value
            for name, value in values.items() if value is not None}


def show_listing(path: str, params: Params, *, all_pages: bool, as_json: bool,
                 render: Callable[[list[dict[str, Any]]], Any], what: str) -> None:
    """Fetch a paged listing (every page with --all), print it, and tell a person (on
    stderr) when it stopped at a page boundary."""
    with connect() as api:
        page = api.pages(path, params, follow=all_pages)
    if not as_json and not page["items"]:
        filtered = any(name not in ("limit", "cursor", "sort") for name, _ in params)
        note(f"no {what} match these filters" if filtered else f"no {what} yet")
        return
    emit(page, as_json, lambda p: render(p["items"]))
    if not as_json and page.get("next_cursor"):
        note(f"more {what} exist: add --all to list them all, or narrow the filters")


def write_or_check_docs(expected: str, output: Path, check: bool, command: str) -> None:
    """A generated reference page: write it, or (`--check`, as CI does) fail when the file
    is not what `command` would write."""
    if check:
        current = output.read_text() if output.is_file() else None
        if current != expected:
            state = "is missing" if current is None else "is out of date"
            raise CliError(f"{output} {state}; run `{command} --output {output}`")
        done(f"{output} is up to date")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(expected)
    done(f"wrote {output}")


def only_one_output(**chosen: bool) -> None:
    """Refuse output flags that contradict each other (`--quiet` with `--json`)."""
    flags = [f"--{name}" for name, on in chosen.items() if on]
    if len(flags) > 1:
        raise CliError(f"{' and '.join(flags)} cannot be combined: choose one")
