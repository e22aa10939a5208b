"""The ingest's memory of which node holds each GPU (remote-write's series name their GPU,
not reliably their node): one read for all GPUs it lacks, entries kept for max_age_s,
GPUs the inventory lacks asked about again, a moved GPU forgotten on request."""

from __future__ import annotations

from gpufleet.services.inventory.node_units import GpuOwnersMemo


class Inventory:
    def __init__(self, owners: dict[str, str]):
        self.owners = owners
        self.reads: list[set[str]] = []

    def read(self, gpus: set[str]) -> dict[str, str]:
        self.reads.append(set(gpus))
        return {gpu: self.owners[gpu] for gpu in gpus if gpu in self.owners}


def test_one_read_for_the_gpus_it_lacks_then_from_memory_until_max_age():
    now = [0.0]
    memo = GpuOwnersMemo(max_age_s=300, monotonic_s=lambda: now[0])
    inventory = Inventory({"GPU-a": "node-1", "GPU-b": "node-2"})
    assert memo.get({"GPU-a", "GPU-b", "GPU-x"}, inventory.read) == {
        "GPU-a": "node-1", "GPU-b": "node-2"}
    assert inventory.reads == [{"GPU-a", "GPU-b", "GPU-x"}]
    assert memo.get({"GPU-a", "GPU-x"}, inventory.read) == {"GPU-a": "node-1"}
    assert inventory.reads[1:] == [{"GPU-x"}]  # an unknown GPU may register any time
    inventory.owners["GPU-a"] = "node-3"  # moved through another server
    now[0] = 301.0
    assert memo.get({"GPU-a"}, inventory.read) == {"GPU-a": "node-3"}


def test_a_forgotten_gpu_is_read_again():
    memo = GpuOwnersMemo(max_age_s=300, monotonic_s=lambda: 0.0)
    inventory = Inventory({"GPU-a": "node-1"})
    memo.get({"GPU-a"}, inventory.read)
    inventory.owners["GPU-a"] = "node-2"
    memo.forget({"GPU-a"})
    assert memo.get({"GPU-a"}, inventory.read) == {"GPU-a": "node-2"}
    assert len(inventory.reads) == 2
