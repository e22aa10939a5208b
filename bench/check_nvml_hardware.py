"""Check the agent's nvml backend on real GPUs, read-only, and end to end through a server.

    python bench/check_nvml_hardware.py [--backend nvml|sim] [--out DIR] [--load-s 20]

It never changes a GPU setting (no MIG, clock, power or reset call): it reads.

1. Backend: `NvmlBackend.discover()` (what the agent registers: model, memory, MIG mode,
   NVLink, host) and two `collect()`s while a child process keeps the GPU busy (a PyTorch
   matrix product, tagged `GPUFLEET_ALLOCATION=GR-NVMLCHECK` in its environment) — then
   which catalogue metrics NVML answered on this architecture, which it did not (and why
   the catalogue says so), whether the values are in range, and the process with its claim.
2. End to end: `gpufleet serve` on a fresh data dir, an environment and a join token through
   the API, `gpufleet agent --backend nvml --once`, then the node, its GPUs and their latest
   telemetry as the API answers them.

With `--backend sim` it runs part 2 on a simulated node, to check the script without a GPU.
Writes `nvml_check.json` (everything read) under `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gpufleet.domain.telemetry.catalogue import CATALOGUE  # noqa: E402

BY_NAME = {metric.name: metric for metric in CATALOGUE}
# Plausible ranges per catalogue unit: a reading outside is reported, not fatal.
RANGES = {"percent": (0, 100), "celsius": (5, 110), "watts": (0, 2000), "mhz": (0, 5000)}
LOAD = """
import os, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(os.environ["LOAD_S"])
while time.time() < end:
    (a @ a).sum().item()
"""


def start_load(seconds: float) -> subprocess.Popen | None:
    env = dict(os.environ, LOAD_S=str(seconds), GPUFLEET_ALLOCATION="GR-NVMLCHECK")
    try:
        return subprocess.Popen([sys.executable, "-c", LOAD], env=env)
    except OSError as exc:
        print(f"no load process: {exc}")
        return None


def check_backend(report: dict, load_s: float) -> None:
    from gpufleet.agent.nvml_backend import NvmlBackend

    with NvmlBackend("nvml-check", process_every=1) as backend:
        registration = backend.discover()
        report["registration"] = json.loads(registration.model_dump_json())
        print("== discover()")
        for gpu in registration.gpus:
            print("  ", json.dumps(json.loads(gpu.model_dump_json()))[:600])
        load = start_load(load_s)
        time.sleep(min(8.0, load_s / 2))  # the product warms up; NVML's rates need two reads
        started = time.process_time()
        backend.collect()
        time.sleep(2.0)
        snapshot = backend.collect()
        report["two_collects_cpu_ms"] = (time.process_time() - started) * 1000
        if load:
            load.wait()
    report["snapshot"] = json.loads(snapshot.model_dump_json())
    print(f"== collect(): {len(snapshot.units)} units; problems: {list(snapshot.problems)}")
    for unit in snapshot.units:
        answered = {k for k, v in unit.values.items() if v is not None}
        answered |= {lv.metric for lv in unit.labelled if lv.value is not None}
        expected = [m for m in CATALOGUE  # process metrics are read per process, below
                    if m.nvml is not None and not m.name.startswith("process.")]
        missing = sorted(m.name for m in expected if m.name not in answered)
        print(f"  unit {unit.gpu_uuid} mig={unit.mig_uuid}: {len(answered)} metrics answered "
              f"of {len(expected)} with an NVML source")
        print(f"  not answered: {missing}")
        for name in sorted(unit.values):
            value = unit.values[name]
            metric = BY_NAME.get(name)
            unit_name = metric.unit.value if metric else ""
            low_high = RANGES.get(str(unit_name))
            flag = ""
            if value is not None and low_high and not low_high[0] <= value <= low_high[1]:
                flag = "  <-- OUT OF RANGE"
            print(f"    {name:42s} {value!s:>22} {unit_name}{flag}")
        print(f"  labelled series: {len(unit.labelled)} "
              f"({sorted({lv.metric for lv in unit.labelled})})")
        for process in unit.processes:
            print(f"  process {process.pid} {process.name}: claims "
                  f"{process.claimed_allocation!r}, values {process.values}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_end_to_end(report: dict, backend: str) -> None:
    data = Path(tempfile.mkdtemp(prefix="gf-nvml-check-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gpufleet = [sys.executable, "-m", "gpufleet"]
    with open(data / "server.log", "w") as log:
        server = subprocess.Popen([*gpufleet, "serve", "--port", str(port), "--data-dir",
                                   str(data / "server")], stdout=subprocess.DEVNULL, stderr=log)
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        token = (data / "server" / "admin-token").read_text().strip()
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                           timeout=30)
        api.post("/api/v1/environments", json={"name": "lab", "kind": "onprem"})
        join = api.post("/api/v1/join-tokens", json={"environment": "lab"}).json()
        extra = ["--sim-shape", "dgx-h100"] if backend == "sim" else []
        agent = subprocess.run(
            [*gpufleet, "agent", "--backend", backend, "--server", url, "--join-token",
             join["tokens"][0]["token"], "--state-dir", str(data / "agent"), "--once", *extra],
            capture_output=True, text=True, timeout=180)
        print(f"== agent --once: exit {agent.returncode}\n{agent.stdout[-2000:]}"
              f"{agent.stderr[-3000:]}")
        report["agent_exit"] = agent.returncode
        nodes = api.get("/api/v1/nodes").json()
        gpus = api.get("/api/v1/gpus").json()
        latest = api.get("/api/v1/telemetry/latest").json()
        report.update(api_nodes=nodes, api_gpus=gpus, api_latest=latest)
        print("== GET /api/v1/nodes\n", json.dumps(nodes)[:1500])
        print("== GET /api/v1/gpus\n", json.dumps(gpus)[:2500])
        print("== GET /api/v1/telemetry/latest\n", json.dumps(latest)[:4000])
    finally:
        server.terminate()
        server.wait(timeout=30)
        print("== server log tail\n", (data / "server.log").read_text()[-1500:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["nvml", "sim"], default="nvml")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--load-s", type=float, default=20.0)
    args = parser.parse_args()
    report: dict = {}
    try:
        if args.backend == "nvml":
            check_backend(report, args.load_s)
        check_end_to_end(report, args.backend)
    finally:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "nvml_check.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
