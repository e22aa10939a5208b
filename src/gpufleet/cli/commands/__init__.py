"""One module per command group; `gpufleet.cli.main` assembles them.

These modules do not use `from __future__ import annotations`: Typer reads every option
from the annotations each time it builds the command tree, and string annotations would
be re-evaluated (a new `typer.Option` each time), tripling the CLI's start-up cost.
"""
