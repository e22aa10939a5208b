"""`gpufleet chatops link CODE` and `gpufleet chatops identities ls | link | unlink` (HTTP
through the test app, as the bootstrap admin)."""

from __future__ import annotations

import pytest

from gpufleet.services.chatops.identity import ChatUser
from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows


@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


def test_link_a_code_then_list_and_unlink(cli, gf, api):
    code = gf.chatops.issue_link_code(ChatUser("slack", "T0TEAM", "U0ADMIN"))
    said = ok("chatops", "link", code)
    assert "linked: slack user U0ADMIN in T0TEAM acts as admin" in said.stdout
    assert_one_error_line(invoke("chatops", "link", code), "already used")
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    linked = json_of("chatops", "identities", "link", "--platform", "mattermost",
                     "--team", "mmteam", "--chat-user", "mmuser", "--user", "mia")
    assert linked["linked_by"] == "user:admin"
    listed = ok("chatops", "identities", "ls").stdout
    assert rows(listed, "slack")[0][:4] == ["slack", "T0TEAM", "U0ADMIN", "admin"]
    assert rows(listed, "mattermost")[0][:4] == ["mattermost", "mmteam", "mmuser", "mia"]
    gone = ok("chatops", "identities", "unlink", "--platform", "slack", "--team", "T0TEAM",
              "--chat-user", "U0ADMIN")
    assert "unlinked: slack user U0ADMIN (was admin)" in gone.stdout
    assert_one_error_line(invoke("chatops", "identities", "unlink", "--platform", "slack",
                                 "--team", "T0TEAM", "--chat-user", "U0ADMIN"), "does not exist")
