"""`gpufleet serve` as a real process: uvicorn's own HTTP stack (httptools and uvloop where
installed), the garbage-collector setting, and the upload route answering through them —
the in-process tests (TestClient) never run these."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from gpufleet.server import GC_THRESHOLDS
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH
from tests.serve_process import serve_process


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A `gpufleet serve` process on a free loopback port: (its URL, the admin token)."""
    with serve_process(tmp_path_factory.mktemp("serve"),
                       telemetry_max_batch_bytes=4096) as served:
        yield served


def upload(url: str, token: str | None, body: bytes) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(url + TELEMETRY_BATCHES_PATH, content=body, headers=headers)


def test_an_upload_without_a_token_is_refused_before_its_body_is_read(server):
    url, _ = server
    reply = upload(url, None, gzip.compress(b"{}"))
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "missing_token"


def test_an_upload_is_checked_and_refused_naming_the_problem(server):
    url, admin = server
    assert upload(url, admin, gzip.compress(b"{}")).json()["error"]["code"] == "forbidden"
    ingest = httpx.post(url + "/api/v1/tokens", json={"name": "relay", "role": "ingest"},
                        headers={"Authorization": f"Bearer {admin}"}).json()["token"]
    reply = upload(url, ingest, b"not gzip")
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "malformed_batch"
    too_big = upload(url, ingest, bytes(5000))
    assert too_big.status_code == 413
    assert too_big.json()["error"]["details"] == {"max_bytes": 4096}


def test_the_upload_route_is_in_the_served_api_description(server):
    url, _ = server
    assert "post" in httpx.get(url + "/openapi.json").json()["paths"][TELEMETRY_BATCHES_PATH]


def test_the_server_collects_garbage_less_often_than_python_by_default():
    done = subprocess.run([sys.executable, "-c", (
        "import gc; from gpufleet.server import tune_garbage_collector; "
        "tune_garbage_collector(); print(gc.get_threshold())")],
        capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(GC_THRESHOLDS)
    assert GC_THRESHOLDS[0] > 700
