"""Builders for test payloads: nodes and GPUs shaped like what agents send."""

from __future__ import annotations

GIB = 1024**3


def gpu_uuid(node: int, index: int) -> str:
    return f"GPU-{node:08x}-0000-4000-8000-{index:012x}"


def gpu(node: int, index: int, name: str = "NVIDIA H100 80GB HBM3",
        pci_device_id: int | None = 0x233010DE, **extra) -> dict:
    return {"uuid": gpu_uuid(node, index), "index": index, "name": name,
            "pci_device_id": pci_device_id, "memory_bytes": 80 * GIB, **extra}


def registration(node: int, gpus: int = 8, **extra) -> dict:
    body = {"machine_id": f"machine-{node}", "hostname": f"node-{node}", "cpu_cores": 112,
            "memory_bytes": 2048 * GIB, "labels": {"rack": f"r{node % 4}"},
            "gpus": [gpu(node, i) for i in range(gpus)]}
    body.update(extra)
    return body


def create_environment(api, name: str = "onprem-hpc", kind: str = "onprem", **extra) -> dict:
    response = api.post("/api/v1/environments", json={"name": name, "kind": kind, **extra})
    assert response.status_code == 201, response.text
    return response.json()


def join_token(api, environment: str = "onprem-hpc") -> str:
    response = api.post("/api/v1/join-tokens", json={"environment": environment})
    assert response.status_code == 201, response.text
    return response.json()["tokens"][0]["token"]


def register(api, node: int, environment: str = "onprem-hpc", **extra) -> dict:
    """Join a node with a fresh join token; returns the registration reply."""
    token = join_token(api, environment)
    response = api.as_(token).post("/api/v1/agent/register", json=registration(node, **extra))
    assert response.status_code == 200, response.text
    return response.json()
