"""`gpufleet query | funnel | idle | top` against the real app (HTTP through the test app)."""

from __future__ import annotations

import re

import pytest

from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows
from tests.services.telemetry.test_queries import HOURS, fleet  # noqa: F401  (the fixture)


def cell(text: str, first: str, column: str) -> str:
    """The cell under the header `column` in the one table row whose first cell starts with
    `first` (headers may hold single spaces: `idle since`; columns are left-aligned)."""
    lines = text.splitlines()
    header = next(line for line in lines if re.search(rf"(^|  ){re.escape(column)}(  |$)", line))
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    at = names.index(column)
    [row] = [line for line in lines if line.split() and line.split()[0].startswith(first)]
    end = starts[at + 1] if at + 1 < len(starts) else None
    return row[starts[at]:end].strip()


@pytest.fixture
def cli(cli_in_process, fleet) -> dict:  # noqa: F811
    return fleet


def test_query_prints_a_table_and_json(cli):
    out = ok("query", "gpu.sm_active", "--by", "project", "--since", "5h", "--step", "1h").stdout
    assert rows(out, "vision")[0][:2] == ["vision", "60.0"]
    assert rows(out, "speech")[0][:2] == ["speech", "0.0"]
    data = json_of("query", "gpu.sm_active", "--by", "project", "--since", "5h", "--step", "1h")
    assert {s["labels"]["project"] for s in data["series"]} == {"vision", "speech"}


def test_bad_input_is_one_error_line(cli):
    assert_one_error_line(invoke("query", "gpu.nope"), "unknown metric")
    assert_one_error_line(invoke("query", "gpu.sm_active", "--since", "soon"), "soon")
    assert_one_error_line(invoke("funnel", "--by", "colour"), "colour")


def test_funnel(cli):
    out = ok("funnel", "--by", "project", "--window", "24h").stdout
    assert cell(out, "vision", "allocated") == f"{HOURS:.1f}"
    assert cell(out, "vision", "active") == f"{HOURS:.1f}"
    assert cell(out, "speech", "active") == "0.0"
    assert cell(out, "vision", "efficiency %") == "60.0"
    assert rows(out, "fleet")
    data = json_of("funnel", "--window", "24h")
    assert data["fleet"]["total_gpu_hours"] == pytest.approx(4 * HOURS)


def test_idle(cli):
    out = ok("idle").stdout
    assert "idle for 4 h (activity < 5 %)" in out
    assert cell(out, cli["speech"], "state") == "idle_held"
    assert cell(out, cli["speech"], "memory GiB") == "2"
    assert [i["allocation"] for i in json_of("idle", "--held-only")["items"]] == [cli["speech"]]


def test_an_idle_window_under_an_hour_reads_in_minutes():
    from gpufleet.cli.commands.telemetry import _window_text
    assert (_window_text(0.25), _window_text(4.0), _window_text(1.5)) == (
        "15 min", "4 h", "1.5 h")


def test_top_once(cli):
    out = ok("top", "--once", "--limit", "2").stdout
    assert "busiest" in out and cli["busy"] in out
    assert json_of("top", "--limit", "1")["busiest"][0]["gpu_uuid"] == cli["busy"]


def test_top_fits_the_terminal_names_projects_and_explains_its_columns():
    from rich.console import Console

    from gpufleet.cli.commands.telemetry import _top_view

    group = {"units": 1, "allocated_gpus": 1.0, "activity_percent": 50.0,
             "sm_active_percent": 40.0, "memory_used_bytes": 2**30}
    unit = {"gpu_uuid": "GPU-1", "mig_uuid": None, "node": "n1", "activity_percent": 90.0,
            "sm_active_percent": 80.0, "memory_used_bytes": 2**30,
            "charged_to": [{"allocation": "GR-7", "project": "vision", "weight": 1.0}]}
    view = {"at": "2026-01-01T00:00:00Z", "fleet": {**group, "group": {}},
            "by_environment": [{**group, "group": {"environment": "onprem"}}],
            "by_project": [{**group, "group": {"project": f"p{n:02}"}} for n in range(63)],
            "busiest": [unit], "idlest_allocated": [unit]}
    console = Console(width=120, record=True)
    console.print(_top_view(view, height=40))
    text = console.export_text()
    assert "p00" in text and "p62" not in text  # the head of the list, as the server sorts it
    assert len(text.splitlines()) <= 40
    assert "projects holding the most GPUs; 47 more" in text and "or --json" in text
    assert "GR-7 (vision)" in text
    assert "allocated GPUs: the GPU share" in " ".join(text.split())


def test_zombies_and_unattributed_usage_from_the_cli(cli):
    zombies = ok("zombies").stdout
    assert rows(zombies, cli["free"])[0][3:5] == ["303", "miner"]
    assert "no_binding" in zombies and "reasons: no_binding" in " ".join(zombies.split())
    assert {z["pid"] for z in json_of("zombies")} >= {303}
    unattributed = ok("unattributed").stdout
    kinds = {(u["pid"], u["reason"]) for u in json_of("unattributed")}
    assert {(202, "mismatch"), (303, "unbound")} <= kinds
    assert cli["vision"] in unattributed  # 202 claims vision's allocation on speech's GPU
