"""`gpufleet whatif`: replays on hand-made inputs with hand-computed answers, bad input as
one error line (exit status 2), the live fleet's JSON, and one whole openb sequence checked
independently of the engine."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpufleet.cli import client as cli_client
from gpufleet.cli.main import app
from gpufleet.domain.placement import POLICIES
from tests.placement_builders import MIG, fleet, node

OPENB = Path("/work/shared/data/openb")
runner = CliRunner()

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n1,8000,16384,2,T4
n2,4000,8192,1,P100
"""
# Hand-computed, whatever the policy (every choice is forced):
#   a  2 whole GPUs            -> n1 [0, 1]            allocated 2000
#   b  500 milli               -> n2 [0]               allocated 2500
#   c  600 milli               -> refused: no GPU has 600 free (no_capacity)
#   d  host-only, 5000 m-CPU   -> n1 (n2 has 3000 m-CPU left)
#   e  400 milli, 4000 m-CPU   -> refused: n2's GPU fits, its CPU does not (host_resources)
#   f  400 milli on a T4       -> refused: both T4s are held (no_capacity)
#   g  500 milli on a P100     -> n2 [0]               allocated 3000 = 100 %
REQUESTS = [
    ("a", 2000, 1024, 2, 1000, ""), ("b", 1000, 1024, 1, 500, ""),
    ("c", 1000, 1024, 1, 600, ""), ("d", 5000, 1024, 0, 0, ""),
    ("e", 4000, 1024, 1, 400, ""), ("f", 1000, 1024, 1, 400, "T4"),
    ("g", 1000, 1024, 1, 500, "P100"),
]
EXPECTED_PLACEMENTS = [
    {"name": "a", "node": "n1", "gpus": [0, 1], "milli": 1000},
    {"name": "b", "node": "n2", "gpus": [0], "milli": 500},
    {"name": "c", "node": None, "gpus": [], "milli": 0},
    {"name": "d", "node": "n1", "gpus": [], "milli": 0},
    {"name": "e", "node": None, "gpus": [], "milli": 0},
    {"name": "f", "node": None, "gpus": [], "milli": 0},
    {"name": "g", "node": "n2", "gpus": [0], "milli": 500},
]


def write_openb(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(dict(zip(
        ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"), r,
        strict=True))) + "\n" for r in REQUESTS))
    return nodes, requests


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["whatif", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("policy", POLICIES)
def test_openb_replay_on_a_hand_made_fleet(tmp_path, policy):
    nodes, requests = write_openb(tmp_path)
    out = tmp_path / "placements.jsonl"
    report = run_json(str(requests), "--nodes-csv", str(nodes), "--policy", policy,
                      "--placements-out", str(out))
    assert (report["tasks"], report["placed"], report["refused"]) == (7, 4, 3)
    assert report["refused_by_reason"] == {"no_capacity": 2, "host_resources": 1}
    assert report["total_milli"] == 3000 and report["allocated_milli"] == 3000
    assert report["allocation_ratio"] == 1.0
    assert report["free_milli"] == 0 and report["fragmentation_ratio"] == 0.0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == EXPECTED_PLACEMENTS


def test_the_table_report(tmp_path):
    nodes, requests = write_openb(tmp_path)
    result = runner.invoke(app, ["whatif", str(requests), "--nodes-csv", str(nodes)])
    assert result.exit_code == 0, result.output
    assert "GPU allocation ratio" in result.stdout and "100.00%" in result.stdout
    assert "host_resources" in result.stdout
    assert "stranded by fragmentation (share of fleet)" in result.stdout


PACKING_NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n1,64000,262144,4,T4
n2,64000,262144,4,T4
"""
# A host-only task, three 1-GPU tasks, then a 4-GPU task, on two 4-GPU nodes. Hand-computed:
#   binpack: the three on n1, the 4-GPU task on n2; n1 keeps one free GPU, which the
#            4-GPU kind (1/4 of the GPU tasks) cannot use: 250 fragmented milli-GPU.
#   spread:  n1 gets two, n2 one; the 4-GPU task is refused; 5,000 free, all of it
#            useless to the 4-GPU kind: 1,250 fragmented milli-GPU.
# The share of free capacity is 25 % both ways; the share of the fleet is not.
PACKING_REQUESTS = [("h", 100, 64, 0, 0, "")] + [
    (f"w{i}", 1000, 1024, 1, 1000, "") for i in range(3)] + [("big", 1000, 1024, 4, 1000, "")]


@pytest.mark.parametrize(("policy", "free", "fragmented"), [
    ("binpack", 1000, 250.0), ("spread", 5000, 1250.0)])
def test_fragmentation_strands_more_of_the_fleet_when_spreading(tmp_path, policy, free,
                                                                fragmented):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(PACKING_NODES_CSV)
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(dict(zip(
        ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"), r,
        strict=True))) + "\n" for r in PACKING_REQUESTS))
    report = run_json(str(requests), "--nodes-csv", str(nodes), "--policy", policy)
    assert report["free_milli"] == free
    assert report["fragmented_milli"] == fragmented  # the host-only task weighs nothing
    assert report["fragmentation_ratio"] == pytest.approx(0.25)
    assert report["stranded_ratio"] == pytest.approx(fragmented / 8000)


SPEC = """
seed: 1
environments:
  - {name: lab, kind: onprem, provider: kt, region: daejeon, default_sharing_mode: exclusive}
node_groups:
  - {environment: lab, shape: l40s-4, count: 1, hostname_prefix: l40s}
  - {environment: lab, shape: mig-h100, count: 1, hostname_prefix: mig,
     mig_layouts: [[3g.40gb, 3g.40gb]]}
"""
# 4 whole L40S + 8 H100 with two unbound 3g.40gb each = 12,000 milli-GPU.
#   t=0   2 whole GPUs, leaves at t=10            placed (2000)
#   t=1   3 whole GPUs                            refused: 2 free (no_capacity)
#   t=10  3 whole GPUs: the first left at t=10    placed (3000)
#   t=11  one 3g.40gb: an existing instance       placed (weight max(3/7, 4/8) = 500)
#   t=12  0.5 of a shared GPU                     refused: no shared GPU (no_capacity)
#   t=13  1g.10gb on an L40S                      refused: no MIG geometry (mig_model_unknown)
TRACE = [
    {"name": "t0", "arrival_s": 0, "departure_s": 10, "kind": "whole", "count": 2},
    {"name": "t1", "arrival_s": 1, "kind": "whole", "count": 3, "same_node": True},
    {"name": "t2", "arrival_s": 10, "kind": "whole", "count": 3, "cpu_milli": 3000,
     "memory_mib": 1024},
    {"name": "t3", "arrival_s": 11, "kind": "mig", "mig_profile": "3g.40gb"},
    {"name": "t4", "arrival_s": 12, "kind": "shared", "milli": 500},
    {"name": "t5", "arrival_s": 13, "kind": "mig", "mig_profile": "1g.10gb",
     "models": ["L40S-48GB"]},
]


def test_gpufleet_trace_with_departures_against_a_fleet_spec(tmp_path):
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(t) + "\n" for t in TRACE))
    out = tmp_path / "placements.jsonl"
    report = run_json(str(trace), "--fleet-spec", str(spec), "--placements-out", str(out))
    assert report["gpus"] == 12 and report["departed"] == 1
    assert report["allocated_milli"] == 3500
    assert report["allocation_ratio"] == pytest.approx(3500 / 12000)
    assert report["peak_allocation_ratio"] == pytest.approx(3500 / 12000)
    assert report["refused_by_reason"] == {"no_capacity": 2, "mig_model_unknown": 1}
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["node"] is not None for line in lines] == [True, False, True, True, False,
                                                             False]
    assert lines[2]["node"] == "l40s-001" and len(lines[2]["gpus"]) == 3
    assert lines[3]["node"] == "mig-001" and lines[3]["milli"] == 500


def test_default_fleet_spec_replays(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(t) + "\n" for t in [
        {"kind": "whole", "count": 8, "nvlink": True, "models": ["H100-80GB"]},
        {"kind": "mig", "mig_profile": "1g.10gb", "count": 3},
        {"kind": "shared", "milli": 250, "count": 2},
    ]))
    report = run_json(str(trace), "--fleet-spec", "default")
    assert report["placed"] == 3 and report["allocated_milli"] == 8000 + 3 * 143 + 500


@pytest.mark.parametrize(("files", "args", "needle"), [
    ({}, ["missing.jsonl", "--nodes-csv", "nodes.csv"], "no such workload file"),
    ({"w.jsonl": '{"name": "x"\n'}, ["w.jsonl", "--nodes-csv", "nodes.csv"],
     "w.jsonl:1: not valid JSON"),
    ({"w.jsonl": '{"kind": "whole", "count": "two"}\n'}, ["w.jsonl", "--nodes-csv", "nodes.csv"],
     "w.jsonl:1: count must be a number"),
    ({"w.jsonl": '{"kind": "tpu"}\n'}, ["w.jsonl", "--nodes-csv", "nodes.csv"],
     "kind must be whole, mig or shared"),
    ({"w.csv": "name,cpu_milli\nx,1\n"}, ["w.csv", "--nodes-csv", "nodes.csv"],
     "not an openb pod list"),
    ({"w.jsonl": '{"kind": "whole"}\n', "bad.csv": "sn,cpu_milli,memory_mib,gpu,model\n"
      "n1,lots,1,1,T4\n"}, ["w.jsonl", "--nodes-csv", "bad.csv"],
     "bad.csv:2: cpu_milli must be a whole number"),
    ({"w.jsonl": '{"kind": "whole"}\n'}, ["w.jsonl", "--nodes-csv", "nodes.csv", "--policy",
                                         "first-fit"], "unknown placement policy 'first-fit'"),
    ({"w.jsonl": '{"kind": "whole", "models": ["H900-1TB"]}\n'},
     ["w.jsonl", "--nodes-csv", "nodes.csv"], "unknown GPU model 'H900-1TB'"),
    ({"w.jsonl": '{"kind": "whole"}\n'}, ["w.jsonl"], "give exactly one fleet"),
    ({"w.jsonl": '{"kind": "whole"}\n', "f.yaml": "seed: [\n"},
     ["w.jsonl", "--fleet-spec", "f.yaml"], "not valid YAML"),
    ({"w.jsonl": '{"arrival_s": 5}\n{"arrival_s": 1}\n'}, ["w.jsonl", "--nodes-csv",
                                                           "nodes.csv"], "arrival order"),
])
def test_bad_input_is_one_error_line_and_exit_status_2(tmp_path, monkeypatch, files, args,
                                                        needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = runner.invoke(app, ["whatif", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and needle in errors[0], errors


def test_live_fleet_comes_from_the_servers_fleet_state(tmp_path, monkeypatch):
    state = fleet(node("gpu-a", 2, cpu=8000, memory=4096),
                  node("mig-a", 1, MIG, mig=[[(9, 0, True), (9, 4, False)]]))
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        return httpx.Response(200, json=state.to_json())

    @contextmanager
    def fake_http(base_url: str):
        with httpx.Client(base_url=base_url, transport=httpx.MockTransport(handler)) as http:
            yield http

    monkeypatch.setattr(cli_client, "http_factory", fake_http)
    monkeypatch.setenv("GPUFLEET_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("GPUFLEET_URL", "http://gpufleet.example:8080")
    monkeypatch.setenv("GPUFLEET_TOKEN", "gft_test")
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"kind": "whole", "count": 2, "cpu_milli": 1000}\n'
                     '{"kind": "mig", "mig_profile": "3g.40gb"}\n'
                     '{"kind": "mig", "mig_profile": "3g.40gb"}\n')
    report = run_json(str(trace), "--live")
    assert seen == [("/api/v1/placement/fleet-state", "Bearer gft_test")]
    assert report["gpus"] == 3 and report["placed"] == 2
    assert report["refused_by_reason"] == {"no_capacity": 1}


def test_live_fleet_with_malformed_state_is_a_clear_error(tmp_path, monkeypatch):
    @contextmanager
    def fake_http(base_url: str):
        transport = httpx.MockTransport(lambda r: httpx.Response(200, json={"nodes": 3}))
        with httpx.Client(base_url=base_url, transport=transport) as http:
            yield http

    monkeypatch.setattr(cli_client, "http_factory", fake_http)
    monkeypatch.setenv("GPUFLEET_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("GPUFLEET_URL", "http://gpufleet.example:8080")
    monkeypatch.setenv("GPUFLEET_TOKEN", "gft_test")
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"kind": "whole"}\n')
    result = runner.invoke(app, ["whatif", str(trace), "--live"])
    assert result.exit_code == 2 and "fleet state" in result.stderr


@pytest.mark.skipif(not (OPENB / "requests").is_dir(),
                    reason=f"the openb trace is not at {OPENB} (shared data absent)")
def test_a_whole_openb_sequence_checked_independently(tmp_path):
    """Every placement is re-checked from the files alone: node capacities, CPU, memory,
    task limit, gpu_spec, whole GPUs free, no GPU past 1000 milli; and the allocation ratio
    recomputed from the placements equals the one reported."""
    sequence = OPENB / "requests" / "default-tune1.3-seed43.jsonl"
    nodes_csv = OPENB / "openb_node_list_gpu_node.csv"
    out = tmp_path / "placements.jsonl"
    report = run_json(str(sequence), "--nodes-csv", str(nodes_csv), "--policy", "binpack",
                      "--placements-out", str(out))
    with nodes_csv.open() as handle:
        nodes = {row["sn"]: row for row in csv.DictReader(handle)}
    tasks = [json.loads(line) for line in sequence.read_text().splitlines()]
    placements = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["name"] for p in placements] == [t["name"] for t in tasks]
    cpu = {name: int(row["cpu_milli"]) for name, row in nodes.items()}
    memory = {name: int(row["memory_mib"]) for name, row in nodes.items()}
    count = defaultdict(int)
    used: dict[tuple[str, int], int] = defaultdict(int)
    allocated = 0
    for task, placement in zip(tasks, placements, strict=True):
        assert set(placement) == {"name", "node", "gpus", "milli"}
        if placement["node"] is None:
            continue
        name = placement["node"]
        row = nodes[name]
        if task["gpu_spec"]:
            assert row["model"] in task["gpu_spec"].split("|")
        cpu[name] -= task["cpu_milli"]
        memory[name] -= task["memory_mib"]
        count[name] += 1
        assert cpu[name] >= 0 and memory[name] >= 0 and count[name] <= 1001
        gpus = placement["gpus"]
        assert len(set(gpus)) == len(gpus) == task["num_gpu"]
        assert all(0 <= g < int(row["gpu"]) for g in gpus)
        shared = task["num_gpu"] == 1 and task["gpu_milli"] < 1000
        assert placement["milli"] == (task["gpu_milli"] if task["num_gpu"] else 0)
        for gpu in gpus:
            if not shared:
                assert used[(name, gpu)] == 0  # a whole GPU must be completely free
            used[(name, gpu)] += placement["milli"]
            assert used[(name, gpu)] <= 1000
            allocated += placement["milli"]
    assert report["placed"] == sum(p["node"] is not None for p in placements)
    assert allocated == report["allocated_milli"]
    assert allocated / 6_212_000 == pytest.approx(report["allocation_ratio"])


def test_the_shipped_sample_is_what_its_generator_makes():
    from gpufleet.whatif.sample_trace import render, sample_trace, shipped_sample

    with shipped_sample() as path:
        assert path.read_text() == render(sample_trace())


def test_the_sample_replays_on_the_demo_fleet_from_the_readme(tmp_path, monkeypatch):
    from gpufleet.whatif.sample_trace import sample_trace

    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["whatif", "sample", "--fleet-spec", "default", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["tasks"] == len(sample_trace()) > 1000
    assert report["placed"] + report["refused"] == report["tasks"] and report["placed"] > 0
    assert report["departed"] > 0


def test_a_file_named_sample_is_read_as_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample").write_text(
        '{"name": "one", "arrival_s": 0, "kind": "whole", "count": 1}\n')
    result = runner.invoke(app, ["whatif", "sample", "--fleet-spec", "default", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["tasks"] == 1
