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
    """Register node `node` as its agent would: with a fresh join token the first time, then
    with the credential that gave it (a join token takes over no live node); returns the
    registration reply."""
    credentials = vars(api.client).setdefault("node_credentials", {})
    body = registration(node, **extra)
    response = None
    if node in credentials:  # unknown to a store emptied since (a module-scoped client)
        response = api.as_(credentials[node]).post("/api/v1/agent/register", json=body)
    if response is None or response.status_code == 401:
        response = api.as_(join_token(api, environment)).post("/api/v1/agent/register",
                                                              json=body)
    assert response.status_code == 200, response.text
    credentials[node] = response.json()["credential"]
    return response.json()
