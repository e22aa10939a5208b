"""The `gpufleet` CLI against a real server: every HTTP call goes through the ASGI app.

`cli.client.http_factory` is pointed at the conftest's TestClient, so these tests run the
real commands, the real API and a real database (SQLite and PostgreSQL) in-process. The
factory records the base URL each command asked for, which is how the tests see whether a
URL came from the login file or from `GPUFLEET_URL`.
"""

from __future__ import annotations

import json
import stat
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from gpufleet.cli import client as cli_client
from gpufleet.cli.commands import losing_units
from gpufleet.cli.main import app
from gpufleet.settings import login_file_path
from gpufleet.tsdb.protocol import Sample, series
from tests.helpers import create_environment, gpu, join_token, register, registration

runner = CliRunner()
LOGIN_URL = "http://gpufleet.example:8080"


def invoke(*args: object, input: str | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def ok(*args: object, input: str | None = None):
    result = invoke(*args, input=input)
    assert result.exit_code == 0, result.output
    return result


def json_of(*args: object):
    return json.loads(ok(*args, "--json").stdout)


def rows(text: str, first: str) -> list[list[str]]:
    """The table rows (as words) whose first cell starts with `first`."""
    return [words for words in (line.split() for line in text.splitlines())
            if words and words[0].startswith(first)]


def assert_one_error_line(result, *fragments: str) -> str:
    """Exit 1, nothing on stdout, exactly one `error: …` line on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.fixture
def urls(client, monkeypatch) -> list[str]:
    """Route the CLI's HTTP through the test app; the list collects the URLs it asked for."""
    seen: list[str] = []

    @contextmanager
    def through_test_app(base_url: str):
        seen.append(base_url)
        yield client

    monkeypatch.setattr(cli_client, "http_factory", through_test_app)
    return seen


@pytest.fixture
def cli(urls, admin_token, monkeypatch) -> list[str]:
    """The CLI as the bootstrap admin, by `GPUFLEET_TOKEN`."""
    monkeypatch.setenv("GPUFLEET_TOKEN", admin_token)
    return urls


def register_a100s(api, node: int, environment: str, count: int = 4) -> dict:
    body = registration(node, gpus=0)
    body["gpus"] = [gpu(node, i, name="NVIDIA A100-SXM4-80GB", pci_device_id=None)
                    for i in range(count)]
    response = api.as_(join_token(api, environment)).post("/api/v1/agent/register", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def fleet(api) -> dict[str, int]:
    """Two on-prem nodes of 8 × H100 and one cloud node of 4 × A100: 20 GPUs."""
    create_environment(api, "onprem-hpc")
    create_environment(api, "azure-koreacentral", kind="cloud", provider="azure",
                       region="koreacentral")
    register(api, 1)
    register(api, 2)
    register_a100s(api, 3, "azure-koreacentral")
    return {"onprem-hpc": 16, "azure-koreacentral": 4}


# --- login, logout and where the URL and token come from -------------------------------------

def test_login_writes_a_private_file_that_later_commands_use(urls, admin_token):
    result = ok("login", "--url", LOGIN_URL + "/", "--token", admin_token)
    assert f"logged in to {LOGIN_URL} as admin (role admin)" in result.stdout

    path = login_file_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": LOGIN_URL, "token": admin_token}

    assert json_of("whoami")["role"] == "admin"
    assert urls == [LOGIN_URL, LOGIN_URL]


def test_login_asks_for_the_token_without_echoing_it(urls, admin_token):
    result = ok("login", "--url", LOGIN_URL, input=admin_token + "\n")
    assert admin_token not in result.output
    assert json.loads(login_file_path().read_text())["token"] == admin_token


def test_login_with_a_bad_token_stores_nothing(urls, admin_token):
    result = invoke("login", "--url", LOGIN_URL, "--token", "gfa_not-a-token")
    assert_one_error_line(result, f"{LOGIN_URL} refused this token: unknown token (invalid_token)")
    assert not login_file_path().exists()


def test_environment_overrides_the_stored_login(urls, api, admin_token, monkeypatch):
    ok("login", "--url", LOGIN_URL, "--token", admin_token)
    viewer = api.post("/api/v1/tokens", json={"name": "dash", "role": "viewer"}).json()
    monkeypatch.setenv("GPUFLEET_TOKEN", viewer["token"])
    monkeypatch.setenv("GPUFLEET_URL", "http://other.example:9000")

    assert json_of("whoami")["role"] == "viewer"
    assert urls[-1] == "http://other.example:9000"


def test_logout_forgets_the_login(urls, admin_token):
    ok("login", "--url", LOGIN_URL, "--token", admin_token)
    assert "logged out" in ok("logout").stdout
    assert not login_file_path().exists()
    assert_one_error_line(invoke("whoami"), "no API token", "gpufleet login")
    assert "not logged in" in ok("logout").stdout


# --- the fleet ---------------------------------------------------------------------------------

def test_fleet_summary_json_has_one_entry_per_environment(cli, fleet):
    summary = json_of("fleet", "summary")
    assert summary["total_gpus"] == 20
    assert {e["environment"]: e["total_gpus"] for e in summary["by_environment"]} == fleet


def test_fleet_summary_table_counts_by_environment_and_model(cli, fleet):
    text = ok("fleet", "summary").stdout
    assert "20 GPUs on 3 nodes" in text
    by_model = {words[1]: words for words in rows(text, "onprem-hpc")
                + rows(text, "azure-koreacentral")}
    assert by_model["H100-80GB"][-2:] == ["16", "16"]  # free, total
    assert by_model["A100-80GB"][-2:] == ["4", "4"]
    assert rows(text, "all") == [["all", "20", "20"]]
    assert "cordoned" not in text  # only the statuses that occur get a column


def test_fleet_summary_rows_add_up_once_gpus_are_retired(cli, fleet):
    ok("node", "cordon", "node-1")
    ok("node", "retire", "node-2", "--yes")
    text = ok("fleet", "summary").stdout
    header = next(line.split() for line in text.splitlines() if line.startswith("environment"))
    assert header[-2:] == ["total", "retired"]  # retired apart, after the total
    statuses = header[2:-2]
    for words in rows(text, "onprem-hpc") + rows(text, "azure-koreacentral"):
        *counts, total, _retired = (int(w) for w in words[2:])
        assert sum(counts) == total, (statuses, words)
    assert header[2:] == ["free", "cordoned", "total", "retired"]
    assert rows(text, "all") == [["all", "4", "8", "12", "8"]]
    assert "12 GPUs on 2 nodes (8 retired)" in text


def test_fleet_ls_filters_by_environment_and_model(cli, fleet):
    page = json_of("fleet", "ls", "--environment", "onprem-hpc", "--model", "H100-80GB")
    assert len(page["items"]) == 16
    assert {(g["environment"], g["model"]) for g in page["items"]} == {("onprem-hpc",
                                                                         "H100-80GB")}
    assert json_of("fleet", "ls", "-e", "azure-koreacentral", "-m", "H100-80GB")["items"] == []
    both = json_of("fleet", "ls", "-m", "H100-80GB", "-m", "A100-80GB", "--node", "node-3")
    assert [g["index"] for g in both["items"]] == [0, 1, 2, 3]


def test_fleet_ls_table_shows_each_gpu(cli, fleet):
    text = ok("fleet", "ls", "--environment", "azure-koreacentral").stdout
    lines = rows(text, "GPU-")
    assert len(lines) == 4
    assert lines[0][:6] == [gpu(3, 0)["uuid"], "node-3", "azure-koreacentral", "0",
                            "A100-80GB", "80"]


def test_uuids_are_printed_whole_on_a_narrow_terminal(cli, fleet, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = ok("fleet", "ls", "--environment", "azure-koreacentral").stdout
    uuids = {gpu(3, i)["uuid"] for i in range(4)}
    assert {word for line in text.splitlines() for word in line.split()} >= uuids
    assert "…" not in "".join(line for line in text.splitlines() if "GPU-" in line)


def test_fleet_ls_pages_and_follows_every_page_with_all(cli, fleet):
    first = invoke("fleet", "ls", "--limit", "5")
    assert first.exit_code == 0
    assert len(rows(first.stdout, "GPU-")) == 5
    assert "--all" in first.stderr
    page = json_of("fleet", "ls", "--limit", "5")
    assert len(page["items"]) == 5 and page["next_cursor"]
    everything = json_of("fleet", "ls", "--limit", "5", "--all", "--sort", "-model")
    assert len(everything["items"]) == 20 and everything["next_cursor"] is None
    assert everything["items"][0]["model"] == "H100-80GB"
    assert len({g["uuid"] for g in everything["items"]}) == 20


def test_fleet_ls_node_label_filter(cli, fleet):
    page = json_of("fleet", "ls", "--node-label", "rack=r2", "--all")
    assert {g["node"] for g in page["items"]} == {"node-2"}


def test_allocation_and_project_filter_by_the_lifecycle_labels(cli, fleet):
    assert len(json_of("fleet", "ls", "--all")["items"]) == 20
    assert json_of("fleet", "ls", "--project", "vision")["items"] == []
    assert json_of("fleet", "ls", "--allocation", "GR-1042")["items"] == []


def test_fleet_show_one_gpu(cli, fleet):
    uuid = gpu(1, 3)["uuid"]
    assert json_of("fleet", "show", uuid)["index"] == 3
    text = ok("fleet", "show", uuid).stdout
    assert uuid in text and "H100-80GB" in text and "node-1" in text


def test_a_bad_filter_value_is_a_usage_error(cli, fleet):
    result = invoke("fleet", "ls", "--status", "sleeping")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


# --- errors are one line -----------------------------------------------------------------------

def test_api_error_is_one_line_with_exit_1(cli, fleet):
    assert_one_error_line(invoke("node", "show", "nope"),
                          "node 'nope' does not exist", "node_not_found")


def test_unauthenticated_error_says_how_to_log_in(urls, monkeypatch):
    monkeypatch.setenv("GPUFLEET_TOKEN", "gfa_wrong")
    assert_one_error_line(invoke("fleet", "summary"), "unknown token", "gpufleet login")


def test_validation_error_is_one_line(cli):
    assert_one_error_line(invoke("token", "create", "--name", "x"), "role_required")


# --- nodes and GPUs ----------------------------------------------------------------------------

def test_node_cordon_and_uncordon(cli, fleet):
    result = ok("node", "cordon", "node-1", "--reason", "firmware update")
    assert result.stdout.strip() == "cordoned node node-1 (status cordoned)"
    assert [n["name"] for n in json_of("node", "ls", "--status", "cordoned")["items"]] == [
        "node-1"]
    assert len(json_of("fleet", "ls", "--status", "cordoned")["items"]) == 8
    assert "cordoned" in ok("fleet", "summary").stdout
    events = json_of("audit", "ls", "--subject-kind", "node", "--subject", "node-1")
    assert events["items"][0]["action"] == "node.cordoned"
    assert events["items"][0]["reason"] == "firmware update"

    assert "status ready" in ok("node", "uncordon", "node-1").stdout


@pytest.fixture
def a_terminal(monkeypatch):
    """The CLI runs as if on a terminal, so it may ask (CliRunner's stdin is none)."""
    monkeypatch.setattr(losing_units, "interactive", lambda: True)


def test_node_retire_asks_first(cli, fleet, a_terminal):
    refused = invoke("node", "retire", "node-2", input="n\n")
    assert refused.exit_code == 1
    assert json_of("node", "show", "node-2")["status"] == "ready"
    assert "status retired" in ok("node", "retire", "node-2", "--yes").stdout
    assert "status retired" in ok("node", "retire", "node-1", input="y\n").stdout


def test_an_empty_listing_says_so_and_a_misspelt_filter_names_the_choices(cli, fleet):
    empty = ok("node", "ls", "--status", "unreachable")
    assert empty.stdout == "" and "no nodes match these filters" in empty.stderr
    misspelt = invoke("audit", "ls", "--subject-kind", "nodes")
    assert misspelt.exit_code == 2
    assert "'nodes' is not one of" in misspelt.output and "'node'" in misspelt.output


def test_node_retire_without_a_terminal_needs_yes(cli, fleet):
    assert_one_error_line(invoke("node", "retire", "node-2"), "--yes")
    assert json_of("node", "show", "node-2")["status"] == "ready"


def held_on_node_2(api) -> tuple[str, str]:
    """An allocation of 10 H100s (8 + 2 over the two nodes); its code and a GPU on node-2."""
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    code = api.post("/api/v1/requests", json={"project": "vision", "count": 10,
                                              "models": ["H100-80GB"]}).json()["code"]
    units = api.post(f"/api/v1/requests/{code}/approve").json()["units"]
    return code, next(u["gpu_uuid"] for u in units if u["node"] == "node-2")


def test_node_retire_lists_the_allocations_that_lose_units(cli, fleet, api, a_terminal):
    code, _ = held_on_node_2(api)
    node_2_units = sum(u["node"] == "node-2" for u in
                       api.get(f"/api/v1/requests/{code}").json()["units"])
    refused = invoke("node", "retire", "node-2", input="n\n")
    assert refused.exit_code == 1
    assert f"{code}  project vision" in refused.stderr
    assert f"{node_2_units} of 10 units" in refused.stderr
    assert api.get(f"/api/v1/requests/{code}").json()["wait_code"] is None
    ok("node", "retire", "node-2", "--yes")
    shown = " ".join(ok("request", "show", code).stdout.split())
    assert f"degraded lost {node_2_units} of 10 units" in shown and "(node retired)" in shown
    assert api.get(f"/api/v1/requests/{code}").json()["wait_code"] == "units_lost"


def test_gpu_quarantine_asks_when_an_allocation_holds_it(cli, fleet, api):
    code, uuid = held_on_node_2(api)
    result = invoke("gpu", "quarantine", uuid, "--reason", "XID 79")
    assert result.exit_code == 1 and result.stdout == ""
    listing, error = result.stderr.strip().rsplit("\n", 1)
    assert f"{code}  project vision" in listing and "1 of 10 units" in listing
    assert error.startswith("error: ") and "add --yes" in error
    assert json_of("fleet", "show", uuid)["health"] == "healthy"
    ok("gpu", "quarantine", uuid, "--reason", "XID 79", "--yes")
    assert api.get(f"/api/v1/requests/{code}").json()["wait_code"] == "units_lost"


def test_node_ls_and_show(cli, fleet):
    text = ok("node", "ls", "--environment", "onprem-hpc").stdout
    assert "node-1" in text and "node-2" in text and "node-3" not in text
    assert [n["name"] for n in json_of("node", "ls", "--model", "A100-80GB")["items"]] == [
        "node-3"]
    detail = json_of("node", "show", "node-3")
    assert len(detail["gpu_list"]) == 4
    text = ok("node", "show", "node-3").stdout
    assert "azure-koreacentral" in text and gpu(3, 3)["uuid"] in text


def test_gpu_quarantine_and_unquarantine(cli, fleet):
    uuid = gpu(2, 5)["uuid"]
    assert "status quarantined" in ok("gpu", "quarantine", uuid, "--reason", "XID 79").stdout
    shown = json_of("fleet", "show", uuid)
    assert (shown["health"], shown["health_reason"]) == ("quarantined", "XID 79")
    assert "status free" in ok("gpu", "unquarantine", uuid, "--reason", "reseated").stdout
    assert invoke("gpu", "quarantine", uuid).exit_code == 2  # --reason is required


def test_gpu_health_shows_the_history_and_clear_returns_it_to_service(cli, fleet):
    uuid = gpu(2, 6)["uuid"]
    ok("gpu", "quarantine", uuid, "--reason", "XID 79")
    text = " ".join(ok("gpu", "health", uuid).stdout.split())
    assert "health quarantined" in text and "healthy → quarantined" in text
    assert "XID 79 user:admin" in text
    assert f"GPU {uuid} on node node-2 is healthy again" in \
        ok("gpu", "clear", uuid, "--reason", "reseated").stdout
    view = json_of("gpu", "health", uuid)
    assert view["health"] == "healthy" and view["cleared_by"] == "user:admin"
    again = invoke("gpu", "clear", uuid, "--reason", "reseated")
    assert again.exit_code != 0 and "Traceback" not in again.output
    assert_one_error_line(again, "is healthy: there is nothing to clear")
    assert invoke("gpu", "clear", uuid).exit_code == 2  # --reason is required
    ok("gpu", "quarantine", uuid, "--reason", "XID 79 again")
    assert f"GPU {uuid} on node node-2 is retired" in \
        ok("gpu", "retire", uuid, "--reason", "RMA").stdout
    assert json_of("fleet", "show", uuid)["status"] == "retired"


def test_gpu_health_shows_mig_instances_and_clear_mig_returns_one(cli, api, gf, clock):
    """A contained XID 94 that names a MIG instance quarantines it; `gpu health` lists the
    instances; `gpu clear --mig` returns that instance (docs/operations.md)."""
    create_environment(api, "onprem-slicing")
    body = {**registration(7, gpus=0), "gpus": [gpu(7, 0, mig_enabled=True, mig_instances=[
        {"profile_id": 19, "placement_start": 0, "mig_uuid": "MIG-1g-at-0"},
        {"profile_id": 19, "placement_start": 1, "mig_uuid": "MIG-1g-at-1"}])]}
    token = join_token(api, "onprem-slicing")
    assert api.as_(token).post("/api/v1/agent/register", json=body).status_code == 200
    uuid = gpu(7, 0)["uuid"]
    gf.telemetry.write([Sample(series("gpu.xid_errors_total", uuid, "MIG-1g-at-1",
                                      labels={"xid": "94"}, node="node-7"), clock.now(), 1.0)])
    clock.advance(30)
    assert gf.evaluate_gpu_health() == [(uuid, "healthy", "suspect", "xid"),
                                        ("MIG-1g-at-1", "healthy", "quarantined", "mig_xid")]
    text = " ".join(ok("gpu", "health", uuid).stdout.split())
    assert "MIG-1g-at-0 1g.10gb 0 healthy yes" in text
    assert "MIG-1g-at-1 1g.10gb 1 quarantined no" in text
    assert f"MIG instance MIG-1g-at-1 of GPU {uuid} on node node-7 is healthy again" in \
        ok("gpu", "clear", uuid, "--mig", "MIG-1g-at-1", "--reason", "GPU reset").stdout
    again = invoke("gpu", "clear", uuid, "--mig", "MIG-1g-at-1", "--reason", "GPU reset")
    assert_one_error_line(again, "MIG instance MIG-1g-at-1", "is healthy")
    missing = invoke("gpu", "clear", uuid, "--mig", "MIG-nope", "--reason", "x")
    assert_one_error_line(missing, "MIG-nope", "does not exist")


def test_gpu_approve_move(cli, fleet):
    uuid = gpu(1, 0)["uuid"]
    result = ok("gpu", "approve-move", uuid, "--to-node", "node-2", "--reason", "swap")
    assert f"GPU {uuid} may move to node node-2" in result.stdout
    ghost = invoke("gpu", "approve-move", uuid, "--to-node", "node-9")
    assert ghost.exit_code != 0
    assert "node 'node-9' does not exist" in ghost.output
    assert "Traceback" not in ghost.output


# --- tokens, users, projects, environments -----------------------------------------------------

def test_token_create_list_and_revoke(cli):
    created = ok("token", "create", "--name", "grafana", "--role", "viewer")
    secret = created.stdout.strip().splitlines()[-1]
    assert secret.startswith("gfa_")
    assert "not shown again" in created.stderr

    listed = json_of("token", "ls")["items"]
    token_id = next(t["id"] for t in listed if t["name"] == "grafana")
    assert "grafana" in ok("token", "ls").stdout

    assert f"revoked token {token_id} 'grafana'" in ok(
        "token", "revoke", token_id, "--reason", "rotated").stdout
    assert all(t["id"] != token_id for t in json_of("token", "ls")["items"])
    assert any(t["id"] == token_id for t in json_of("token", "ls", "--include-revoked")["items"])


def test_a_revoked_token_is_refused(cli, monkeypatch):
    issued = json_of("token", "create", "--name", "short", "--role", "operator")
    ok("token", "revoke", issued["id"])
    monkeypatch.setenv("GPUFLEET_TOKEN", issued["token"])
    assert_one_error_line(invoke("whoami"), "revoked")


def test_config_show_says_whose_settings_and_server_shows_the_servers(cli, settings,
                                                                     monkeypatch):
    monkeypatch.setenv("GPUFLEET_PORT", "9999")  # this CLI's environment, not the server's
    mine = ok("config", "show").stdout
    assert "settings of this CLI process" in mine
    theirs = ok("config", "show", "--server").stdout
    assert "settings of the server at" in theirs and "as it started" in theirs
    views = {v["name"]: v for v in json_of("config", "show", "--server")}
    assert views["data_dir"]["value"] == str(settings.data_dir)
    assert views["data_dir"]["source"] == "set by the program"
    assert views["port"]["value"] == 8080  # the server started before GPUFLEET_PORT was set

    operator = json_of("token", "create", "--name", "ops", "--role", "operator")
    monkeypatch.setenv("GPUFLEET_TOKEN", operator["token"])
    assert_one_error_line(invoke("config", "show", "--server"), "may not")


def test_join_tokens(cli, fleet):
    issued = json_of("token", "join", "--environment", "onprem-hpc", "--count", "2")
    assert [t["token"][:4] for t in issued["tokens"]] == ["gfj_", "gfj_"]
    text = ok("token", "join", "-e", "onprem-hpc").stdout
    assert "gfj_" in text


def test_users_and_projects(cli):
    assert "created user alice (role member)" in ok(
        "user", "create", "alice", "--role", "member", "--email", "alice@example.org").stdout
    assert "created project vision" in ok(
        "project", "create", "vision", "--organisation", "research",
        "--cost-centre", "CC-7").stdout
    assert "added alice to project vision" in ok("project", "add-member", "vision",
                                                 "alice").stdout

    project = json_of("project", "show", "vision")
    assert (project["members"], project["cost_centre"]) == (["alice"], "CC-7")
    assert "alice" in ok("project", "show", "vision").stdout
    assert [p["name"] for p in json_of("project", "ls")["items"]] == ["vision"]
    assert "vision" in ok("project", "ls").stdout
    users = {u["name"]: u for u in json_of("user", "ls")["items"]}
    assert users["alice"]["projects"] == ["vision"]
    assert "alice@example.org" in ok("user", "ls").stdout

    token = json_of("token", "create", "--name", "alice-laptop", "--user", "alice")
    assert token["role"] == "member"
    assert_one_error_line(invoke("project", "add-member", "vision", "alice"), "already")


def test_environments(cli):
    assert "created environment onprem-slicing (onprem, default sharing mode shared)" in ok(
        "environment", "create", "onprem-slicing", "--kind", "onprem",
        "--default-sharing-mode", "shared").stdout
    environments = json_of("environment", "ls")["items"]
    assert [(e["name"], e["default_sharing_mode"]) for e in environments] == [
        ("onprem-slicing", "shared")]
    assert "onprem-slicing" in ok("environment", "ls").stdout
    assert "0 GPUs on 0 nodes" in ok("fleet", "summary").stdout


def test_identity_listings_page_and_follow_every_page_with_all(cli, fleet):
    ok("project", "create", "vision", "--organisation", "research")
    ok("project", "create", "speech", "--organisation", "research")
    ok("user", "create", "bob", "--role", "viewer")
    for listing, key, expected in [
        ("project", "name", ["speech", "vision"]),
        ("user", "name", ["admin", "bob"]),
        ("environment", "name", ["azure-koreacentral", "onprem-hpc"]),
    ]:
        first = invoke(listing, "ls", "--limit", 1)
        assert first.exit_code == 0, first.output
        assert expected[0] in first.stdout and expected[1] not in first.stdout
        assert "--all" in first.stderr, listing
        every = json_of(listing, "ls", "--limit", 1, "--all")
        assert [item[key] for item in every["items"]] == expected
        assert every["next_cursor"] is None
        assert expected[1] in ok(listing, "ls", "--limit", 1, "--all").stdout


def test_token_ls_filters_by_kind_and_role(cli, fleet):
    ok("token", "create", "--name", "grafana", "--role", "viewer")
    agents = json_of("token", "ls", "--kind", "agent", "--all")["items"]
    assert sorted(t["node"] for t in agents) == ["node-1", "node-2", "node-3"]
    assert [t["name"] for t in json_of("token", "ls", "--kind", "user")["items"]] == [
        "bootstrap admin", "grafana"]
    assert [t["name"] for t in json_of("token", "ls", "--role", "viewer")["items"]] == [
        "grafana"]
    assert "grafana" in ok("token", "ls", "--kind", "user", "--limit", 1, "--all").stdout
    empty = ok("token", "ls", "--role", "operator")
    assert empty.stdout == "" and "no tokens match these filters" in empty.stderr
    misspelt = invoke("token", "ls", "--kind", "agents")
    assert misspelt.exit_code == 2
    assert "'agents' is not one of" in misspelt.output and "'user'" in misspelt.output


def test_audit_ls_table(cli, fleet):
    text = ok("audit", "ls", "--limit", "3").stdout
    assert "environment.created" in text or "node" in text
    assert len(json_of("audit", "ls", "--limit", "2", "--all")["items"]) >= 4
