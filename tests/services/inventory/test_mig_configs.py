"""`GET /api/v1/mig/configs` and `gpufleet mig export` through the real app, on SQLite and
PostgreSQL: layouts from reported instances and from pending MIG plans, the mig-parted
schema (checked as mig-parted's own parser checks it), the not-pinning header, the JSON
node → config map, and bad input."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import yaml
from sqlalchemy import select

from gpufleet.domain.gpu_models import model
from gpufleet.store.tables import Gpu, MigPlan
from tests.cli.test_cli import assert_one_error_line, invoke, ok
from tests.helpers import create_environment, gpu, join_token, register, registration
from tests.lifecycle_world import act, create

PATH = "/api/v1/mig/configs"
H100 = model("H100-80GB").mig
PROFILE = re.compile(r"^(?:\d+c\.)?\d+g\.\d+gb(?:[+-][a-z][a-z.,]*)?$")


def assert_valid_mig_parted(spec: dict) -> None:
    """The rules of mig-parted's api/spec/v1/spec.go: version v1; `mig-configs`, when
    present, non-empty, each config a non-empty list; per entry only the known fields,
    `devices` "all" or GPU indices, `mig-devices` required when enabled and empty when not."""
    assert spec["version"] == "v1"
    assert set(spec) <= {"version", "mig-configs"}
    if "mig-configs" not in spec:
        return
    assert spec["mig-configs"], "mig-parted refuses an empty mig-configs map"
    for entries in spec["mig-configs"].values():
        assert entries
        for entry in entries:
            assert set(entry) <= {"device-filter", "devices", "mig-enabled", "mig-devices"}
            assert entry["devices"] == "all" or all(type(i) is int for i in entry["devices"])
            assert type(entry["mig-enabled"]) is bool
            if entry["mig-enabled"]:
                assert isinstance(entry["mig-devices"], dict)
            else:
                assert not entry.get("mig-devices")
            for profile, count in entry.get("mig-devices", {}).items():
                assert PROFILE.match(profile) and type(count) is int and count > 0


def instance(profile_id: int, start: int | None, **extra) -> dict:
    return {"profile_id": profile_id, "placement_start": start, **extra}


def join(api, number: int, environment: str, gpus: list[dict]) -> dict:
    """Register node `number` as its agent would: with a join token the first time, then
    with the credential that gave it (a join token takes over no live node)."""
    body = registration(number, gpus=0)
    body["gpus"] = gpus
    credentials = vars(api.client).setdefault("node_credentials", {})
    token = credentials.get(number) or join_token(api, environment)
    reply = api.as_(token).post("/api/v1/agent/register", json=body)
    assert reply.status_code == 200, reply.text
    credentials.setdefault(number, reply.json()["credential"])
    return reply.json()


def mixed(number: int) -> list[dict]:
    """GPU 0: 2 × 1g.10gb + 3g.40gb; GPU 1: MIG on, no instances; GPU 2: MIG off."""
    return [gpu(number, 0, mig_enabled=True,
                mig_instances=[instance(19, 0), instance(19, 1), instance(9, 4)]),
            gpu(number, 1, mig_enabled=True), gpu(number, 2)]


def exported(api, **params) -> tuple[dict, str]:
    """(JSON form, YAML file) of one export."""
    as_json = api.get(PATH, params={**params, "format": "json"})
    as_yaml = api.get(PATH, params=params)
    assert as_json.status_code == as_yaml.status_code == 200, as_json.text
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    return as_json.json(), as_yaml.text


def get(api, accept: str | None, **params):
    """The export with an Accept header of our choosing (None: no Accept header at all)."""
    headers = {"Authorization": f"Bearer {api.token}"}
    if accept is not None:
        headers["Accept"] = accept
    return api.client.get(PATH, params=params, headers=headers)


def by_device(spec: dict, config: str) -> dict[int, dict | None]:
    """GPU index → its mig-devices (None when MIG is off) in one config."""
    found = {}
    for entry in spec["mig-configs"][config]:
        for index in entry["devices"]:
            assert index not in found, "a device listed twice"
            found[index] = entry.get("mig-devices") if entry["mig-enabled"] else None
    return found


@pytest.fixture
def slicing(api):
    create_environment(api, "onprem-hpc")
    create_environment(api, "onprem-slicing")


# --- layouts the nodes report ----------------------------------------------------------------
def test_reported_layouts_become_one_config_per_distinct_node_layout(api, slicing, clock):
    join(api, 7, "onprem-slicing", mixed(7))
    join(api, 8, "onprem-slicing", mixed(8))  # the same layout as node-7
    join(api, 9, "onprem-slicing", [
        gpu(9, 0, mig_enabled=True, mig_instances=[instance(14, 0), instance(14, 2),
                                                    instance(15, 4), instance(15, 6)]),
        gpu(9, 1, mig_enabled=True, mig_instances=[instance(0, 0)])])
    register(api, 1)  # 8 whole H100s, MIG off: nothing for mig-parted to do there

    body, text = exported(api)
    spec = yaml.safe_load(text)
    assert_valid_mig_parted(spec)
    assert spec == body["mig_parted"]
    nodes = {n["node"]: n for n in body["nodes"]}
    assert sorted(nodes) == ["node-7", "node-8", "node-9"]
    assert nodes["node-7"]["config"] == nodes["node-8"]["config"] != nodes["node-9"]["config"]
    assert set(spec["mig-configs"]) == {n["config"] for n in body["nodes"]}
    assert nodes["node-7"]["node_label"] == f"nvidia.com/mig.config={nodes['node-7']['config']}"

    assert by_device(spec, nodes["node-7"]["config"]) == {
        0: {"1g.10gb": 2, "3g.40gb": 1}, 1: {}, 2: None}
    assert by_device(spec, nodes["node-9"]["config"]) == {
        0: {"2g.20gb": 2, "1g.20gb": 2}, 1: {"7g.80gb": 1}}
    assert {d["source"] for n in body["nodes"] for d in n["devices"]} == {"reported"}
    assert not any(n["pending_plan"] for n in body["nodes"])
    # Devices of one layout share an entry, listed by index, in mig-parted's own style.
    assert spec["mig-configs"][nodes["node-9"]["config"]][0]["devices"] == [0]
    assert '"1g.10gb": 2' in text and "devices: [0]" in text
    assert body["pins_placements"] is False and "does not pin placements" in body["caveat"]
    assert body["generated_at"].startswith("2026-11-02T09:00:00")


def test_the_file_says_who_made_it_and_that_it_pins_no_placements(api, slicing):
    join(api, 7, "onprem-slicing", mixed(7))
    _, text = exported(api)
    header = text[:text.index("version: v1")]
    assert all(line.startswith("#") or not line for line in header.splitlines())
    assert header.startswith("# NVIDIA mig-parted config, generated by gpufleet ")
    assert "at 2026-11-02T09:00:00Z" in header.splitlines()[0]
    flat = " ".join(line.lstrip("# ") for line in header.splitlines())
    for phrase in ("NOT PINNING PLACEMENTS", "lets the driver choose where each starts",
                   "different placement than gpufleet planned",
                   "actual instances when its agent registers again",
                   "stays unmatched", "MIG plan stays pending",
                   "applies gpufleet's MIG plans itself, with exact placements",
                   "nvidia.com/mig.config=<config>", "nvidia-mig-parted apply"):
        assert phrase in flat, phrase
    assert "# 1 node: node-7" in text


def test_config_names_follow_the_layout_not_the_node(api, slicing):
    join(api, 7, "onprem-slicing", mixed(7))
    first, _ = exported(api)
    join(api, 8, "onprem-slicing", mixed(8))
    second, _ = exported(api, node="node-8")
    assert first["nodes"][0]["config"] == second["nodes"][0]["config"]
    assert first["nodes"][0]["config"].startswith("gpufleet-")


def test_instances_without_placements_still_count(api, slicing):
    """A source without placements (dcgm-exporter) gives counts; mig-parted needs no more."""
    join(api, 7, "onprem-slicing", [gpu(7, 0, mig_enabled=True, mig_instances=[
        instance(19, None, gpu_instance_id=7), instance(19, None, gpu_instance_id=8)])])
    body, text = exported(api)
    assert body["nodes"][0]["devices"][0]["mig_devices"] == {"1g.10gb": 2}
    assert [p["placement_start"] for p in body["nodes"][0]["devices"][0]["placements"]] == \
        [None, None]
    assert_valid_mig_parted(yaml.safe_load(text))


def test_unknown_models_use_the_reported_name_or_are_left_out(api, slicing):
    future = "NVIDIA Z900 MIG Edition"
    join(api, 7, "onprem-slicing", [gpu(7, 0, name=future, pci_device_id=None,
                                        mig_enabled=True, mig_instances=[
                                            instance(3, 0, profile_name="MIG 1g.25gb")])])
    join(api, 8, "onprem-slicing", [gpu(8, 0, name=future, pci_device_id=None,
                                        mig_enabled=True, mig_instances=[instance(3, 0)])])
    body, text = exported(api)
    assert [n["node"] for n in body["nodes"]] == ["node-7"]
    assert body["nodes"][0]["devices"][0]["mig_devices"] == {"1g.25gb": 1}
    assert len(body["notes"]) == 1 and body["notes"][0].startswith("node node-8 left out")
    assert "MIG profile id 3 has no mig-parted name" in body["notes"][0]
    assert f"# Note: {body['notes'][0]}" in text
    assert_valid_mig_parted(yaml.safe_load(text))
    alone, text = exported(api, node="node-8")
    assert alone["notes"][1] == "no node in this selection could be exported: nothing for " \
        "mig-parted to do"
    assert yaml.safe_load(text) == {"version": "v1"}


def test_gpus_gone_from_the_inventory_and_retired_nodes_are_left_out(api, slicing):
    join(api, 7, "onprem-slicing", mixed(7))
    join(api, 7, "onprem-slicing", mixed(7)[:2])  # GPU 2 is no longer reported
    body, _ = exported(api)
    assert [d["index"] for d in body["nodes"][0]["devices"]] == [0, 1]
    assert api.post("/api/v1/nodes/node-7/retire", json={"reason": "gone"}).status_code == 200
    body, text = exported(api)
    assert body["nodes"] == [] and "mig-configs" not in yaml.safe_load(text)
    named, _ = exported(api, node="node-7")
    assert "node node-7 is retired: retired nodes are left out" in named["notes"]


# --- pending plans -----------------------------------------------------------------------------
def test_a_pending_plan_is_exported_and_then_what_the_node_reports(api, people, store):
    member, operator = people
    create_environment(api, "onprem-slicing")
    join(api, 7, "onprem-slicing", [gpu(7, i, mig_enabled=True) for i in range(2)])
    join(api, 8, "onprem-slicing", mixed(8))
    code = create(member, count=4, mig_profile="1g.10gb")["code"]
    units = act(operator, code, "approve")["units"]

    body, text = exported(api, node="node-7")
    spec = yaml.safe_load(text)
    assert_valid_mig_parted(spec)
    (node,) = body["nodes"]
    assert node["pending_plan"] is True
    planned = [d for d in node["devices"] if d["source"] == "plan"]
    assert planned and sum(d["mig_devices"].get("1g.10gb", 0) for d in planned) >= 4
    # The export carries exactly the plans gpufleet keeps for the agent...
    with store.read() as session:
        plans = {uuid: layout for uuid, layout in session.execute(
            select(Gpu.uuid, MigPlan.layout).join(Gpu, Gpu.id == MigPlan.gpu_id))}
    assert {d["gpu_uuid"] for d in planned} == set(plans)
    for device in planned:
        wanted = [(H100.profile(p).name, s) for p, s in plans[device["gpu_uuid"]]]
        assert sorted((p["profile"], p["placement_start"]) for p in device["placements"]) == \
            sorted(wanted)
        assert by_device(spec, node["config"])[device["index"]] == \
            dict(Counter(name for name, _ in wanted))
    # ...which hold every unit granted, by placement (the part mig-parted cannot pin).
    held = {(u["gpu_uuid"], u["mig_profile"], u["mig_start"]) for u in units}
    assert held <= {(d["gpu_uuid"], p["profile"], p["placement_start"])
                    for d in planned for p in d["placements"]}

    # The node applies the plan and reports it: the plan retires, the layout stays.
    join(api, 7, "onprem-slicing", [gpu(7, d["index"], mig_enabled=True, mig_instances=[
        instance(H100.profile_named(p["profile"]).profile_id, p["placement_start"])
        for p in d["placements"]]) for d in node["devices"]])
    after, _ = exported(api, node="node-7")
    assert after["nodes"][0]["pending_plan"] is False
    assert {d["source"] for d in after["nodes"][0]["devices"]} == {"reported"}
    assert after["nodes"][0]["config"] == node["config"]


def test_the_same_counts_at_other_placements_do_not_fulfil_the_plan(api, people):
    """What the header warns of: mig-parted applies counts and the driver picks the starts.
    The node then reports the config's counts, but not gpufleet's placements, so the plan
    stays pending and the bound instances get no MIG UUID."""
    member, operator = people
    create_environment(api, "onprem-slicing")
    join(api, 7, "onprem-slicing", [gpu(7, i, mig_enabled=True) for i in range(2)])
    code = create(member, count=2, mig_profile="1g.10gb")["code"]
    act(operator, code, "approve")
    (node,) = exported(api)[0]["nodes"]

    def elsewhere(device: dict) -> list[dict]:
        """The device's counts, placed from the last allowed start down, as a driver may."""
        placed, taken = [], set()
        for name, count in device["mig_devices"].items():
            profile = H100.profile_named(name)
            for placement in sorted(profile.placements, key=lambda p: -p.start):
                if count and not taken & set(placement.slices):
                    placed.append(instance(profile.profile_id, placement.start))
                    taken |= set(placement.slices)
                    count -= 1
        return placed

    applied = [gpu(7, d["index"], mig_enabled=True, mig_instances=elsewhere(d))
               for d in node["devices"]]
    join(api, 7, "onprem-slicing", applied)
    after, _ = exported(api)
    assert [d["mig_devices"] for d in after["nodes"][0]["devices"]] == \
        [d["mig_devices"] for d in node["devices"]]  # the counts mig-parted would assert
    assert after["nodes"][0]["pending_plan"] is True  # ...but not gpufleet's placements
    devices = api.get(f"/api/v1/requests/{code}").json()["exports"]["CUDA_VISIBLE_DEVICES"]
    assert all(d.startswith("pending:") for d in devices.split(","))


# --- selection, negotiation and bad input -------------------------------------------------------
def test_filters_by_node_and_environment(api, slicing):
    join(api, 7, "onprem-slicing", mixed(7))
    join(api, 3, "onprem-hpc", [gpu(3, 0, mig_enabled=True, mig_instances=[instance(0, 0)])])
    assert [n["node"] for n in exported(api)[0]["nodes"]] == ["node-3", "node-7"]
    assert [n["node"] for n in exported(api, environment="onprem-hpc")[0]["nodes"]] == \
        ["node-3"]
    body, text = exported(api, node="node-7", environment="onprem-slicing")
    assert [n["node"] for n in body["nodes"]] == ["node-7"]
    assert (body["node"], body["environment"]) == ("node-7", "onprem-slicing")
    assert "# Selection: environment onprem-slicing, node node-7." in text


def test_a_selection_without_mig_gpus_is_a_valid_file_that_says_so(api, slicing):
    register(api, 1)
    body, text = exported(api, node="node-1")
    spec = yaml.safe_load(text)
    assert spec == {"version": "v1"}  # mig-parted refuses `mig-configs: {}`
    assert_valid_mig_parted(spec)
    assert body["nodes"] == [] and body["mig_parted"] == spec
    assert body["notes"] == ["no node in this selection has a MIG GPU: nothing for "
                             "mig-parted to do"]
    assert f"# Note: {body['notes'][0]}" in text


@pytest.mark.parametrize(("accept", "expected"), [
    (None, "application/yaml"), ("*/*", "application/yaml"),
    ("application/json", "application/json"), ("application/yaml", "application/yaml"),
    ("application/json, application/yaml", "application/yaml"),
    ("text/html,application/xhtml+xml,*/*;q=0.8", "application/yaml")])
def test_the_accept_header_picks_the_form(api, slicing, accept, expected):
    join(api, 7, "onprem-slicing", mixed(7))
    response = get(api, accept)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(expected)
    forced = get(api, "application/json", format="yaml")
    assert forced.headers["content-type"].startswith("application/yaml")


BAD = {
    "unknown node": ({"node": "ghost"}, 404, "node_not_found", "node 'ghost' does not exist"),
    "unknown environment": ({"environment": "mars"}, 404, "environment_not_found",
                            "environment 'mars' does not exist"),
    "node in another environment": ({"node": "node-7", "environment": "onprem-hpc"}, 404,
                                    "node_not_found",
                                    "node 'node-7' is not in environment 'onprem-hpc'"),
    "unknown format": ({"format": "toml"}, 422, "validation_failed", "format"),
    "overlong node": ({"node": "n" * 300}, 422, "validation_failed", "node"),
}


@pytest.mark.parametrize(("params", "status", "code", "message"), BAD.values(), ids=BAD)
def test_bad_input_is_a_clear_error_in_the_one_shape(api, slicing, params, status, code,
                                                     message):
    join(api, 7, "onprem-slicing", mixed(7))
    for accept in ("application/yaml", "application/json"):
        response = get(api, accept, **params)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == code and message in error["message"], error
        assert set(error) == {"code", "message", "details"}


def test_readers_may_export_and_agents_may_not(api, slicing):
    join(api, 7, "onprem-slicing", mixed(7))
    for role in ("viewer", "operator"):
        user = api.post("/api/v1/users", json={"name": f"u-{role}", "role": role}).json()
        token = api.post("/api/v1/tokens", json={"name": role, "user": user["name"]}).json()
        assert api.as_(token["token"]).get(PATH).status_code == 200
    agent = join(api, 9, "onprem-slicing", [gpu(9, 0)])["credential"]
    refused = api.as_(agent).get(PATH)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert api.as_(None).get(PATH).status_code == 401


# --- the CLI -----------------------------------------------------------------------------------
@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


def test_cli_export_prints_the_file_writes_it_and_gives_json(api, slicing, cli, tmp_path):
    join(api, 7, "onprem-slicing", mixed(7))
    join(api, 3, "onprem-hpc", [gpu(3, 0, mig_enabled=True, mig_instances=[instance(0, 0)])])
    printed = ok("mig", "export").stdout
    assert printed.startswith("# NVIDIA mig-parted config, generated by gpufleet")
    spec = yaml.safe_load(printed)
    assert_valid_mig_parted(spec)
    assert len(spec["mig-configs"]) == 2

    out = tmp_path / "mig.yaml"
    result = ok("mig", "export", "--environment", "onprem-slicing", "--out", out)
    assert result.stdout == ""
    assert "wrote" in result.stderr and "1 config for 1 node" in result.stderr
    assert "pins no MIG placements" in result.stderr
    written = yaml.safe_load(out.read_text())
    assert_valid_mig_parted(written)
    assert len(written["mig-configs"]) == 1

    body = json.loads(ok("mig", "export", "--node", "node-3", "--json").stdout)
    assert [n["node"] for n in body["nodes"]] == ["node-3"]
    assert body["pins_placements"] is False
    assert by_device(body["mig_parted"], body["nodes"][0]["config"]) == {0: {"7g.80gb": 1}}


def test_cli_says_when_there_is_nothing_to_export(api, slicing, cli):
    register(api, 1)
    result = ok("mig", "export", "--node", "node-1")
    assert yaml.safe_load(result.stdout) == {"version": "v1"}
    assert "note: no node in this selection has a MIG GPU" in result.stderr


def test_cli_errors_are_one_line(api, slicing, cli, tmp_path):
    assert_one_error_line(invoke("mig", "export", "--node", "ghost"),
                          "node 'ghost' does not exist", "(node_not_found)")
    assert_one_error_line(invoke("mig", "export", "--environment", "mars"),
                          "(environment_not_found)")
    join(api, 7, "onprem-slicing", mixed(7))
    missing_dir = tmp_path / "no" / "such" / "dir" / "mig.yaml"
    assert_one_error_line(invoke("mig", "export", "--out", missing_dir),
                          f"cannot write {missing_dir}")
