"""`gpufleet events` against the real app: ls with filters, --follow, subscriptions."""

from __future__ import annotations

import json
import re
import threading

import pytest

from gpufleet.domain.access import Role
from gpufleet.services.access.principal import Principal
from gpufleet.wire.inventory import ProjectCreate
from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok

ADMIN = Principal(role=Role.ADMIN, user_name="admin")


@pytest.fixture
def cli(cli_in_process, gf) -> None:
    for name in ("vision", "speech"):
        gf.create_project(ADMIN, ProjectCreate(name=name, organisation="research"))


def test_ls_filters_and_resumes(cli):
    listed = json_of("events", "ls", "--type", "project.*")
    assert [e["subject"]["id"] for e in listed["items"]] == ["vision", "speech"]
    first = listed["items"][0]["id"]
    after = json_of("events", "ls", "--type", "project.*", "--after", first)
    assert [e["subject"]["id"] for e in after["items"]] == ["speech"]
    table = ok("events", "ls", "--project", "speech").stdout
    assert "project.created" in table and "project=speech" in table and "vision" not in table
    assert "no events match" in invoke("events", "ls", "--type", "nothing.*").stderr


def test_follow_prints_one_line_per_event_as_it_happens(cli, gf):
    stop = threading.Event()

    def keep_writing():  # until the follower has one: it starts "from now", whenever that is
        for n in range(200):
            if stop.wait(0.3):
                return
            gf.create_project(ADMIN, ProjectCreate(name=f"late-{n}", organisation="research"))

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        followed = ok("events", "ls", "--follow", "--count", 1, "--type", "project.*")
    finally:
        stop.set()
        writer.join()
    lines = followed.stdout.splitlines()
    assert len(lines) == 1
    assert re.search(r" project\.created project (late-\d+) user:admin project=\1$", lines[0])

    resumed = ok("events", "ls", "--follow", "--after", 0, "--count", 2, "--json",
                 "--type", "project.*").stdout.splitlines()
    assert [json.loads(line)["subject"]["id"] for line in resumed] == ["vision", "speech"]


def test_subscribe_list_and_remove(cli):
    created = ok("events", "subscribe", "tickets", "--url", "https://t.example.org/hook",
                 "--secret", "0123456789abcdef", "--type", "request.approved",
                 "--where", "data.count>=8", "--where", "data.models=~.*H100.*").stdout
    assert created.strip() == ("subscribed tickets: request.approved where data.count>=8 and "
                               "data.models=~.*H100.* → https://t.example.org/hook")
    listed = json_of("events", "subscriptions", "ls")["items"]
    assert [s["name"] for s in listed] == ["tickets"] and "secret" not in listed[0]
    assert "tickets" in ok("events", "subscriptions", "ls").stdout
    assert ok("events", "subscriptions", "rm", "tickets").stdout.strip() == "removed tickets"
    assert "no event subscriptions yet" in invoke("events", "subscriptions", "ls").stderr


def test_bad_input_is_one_error_line(cli):
    assert_one_error_line(
        invoke("events", "subscribe", "bad", "--url", "https://t.example.org/hook",
               "--secret", "0123456789abcdef", "--type", "request.*", "--where", "gpus>=8"),
        "gpus>=8", "unknown field")
    assert_one_error_line(invoke("events", "ls", "--type", "request.[x]"), "request.[x]")
    assert_one_error_line(invoke("events", "ls", "--count", 2), "--count goes with --follow")
    assert_one_error_line(invoke("events", "subscriptions", "rm", "nope"), "nope")
