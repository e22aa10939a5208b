"""The `gpufleet` command line: talks to a server over HTTP (plus `serve`, `agent`, `demo`).

Modules: `errors` (the error tree), `client` (HTTP), `output` (tables and `--json`), `views`
(how inventory objects look as tables), `commands/` (one module per command group) and
`main` (the Typer app and the one place errors become `error: …` lines).
"""
