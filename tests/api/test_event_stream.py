"""The event stream (Server-Sent Events) through the real app, and through a real
uvicorn process for shutdown (docs/operations.md, "Streaming")."""

from __future__ import annotations

import json
import threading
import time

import httpx

from gpufleet.domain.access import Role
from gpufleet.services.access.principal import Principal
from gpufleet.wire.inventory import ProjectCreate
from tests.lifecycle_world import create
from tests.serve_process import serve_process

STREAM = "/api/v1/events/stream"
ADMIN = Principal(role=Role.ADMIN, user_name="admin")


def _project_soon(gf, name: str, delay_s: float = 0.3) -> threading.Thread:
    def write():
        time.sleep(delay_s)
        gf.create_project(ADMIN, ProjectCreate(name=name, organisation="research"))

    writer = threading.Thread(target=write)
    writer.start()
    return writer


def _read(api, count: int, headers=None, params=None,
          then=None) -> tuple[list[dict], list[str]]:
    """The first `count` events of the stream, and every line read until then; `then()`
    runs once the stream is open (its starting point fixed)."""
    events, lines = [], []
    with api.client.stream("GET", STREAM, params=params,
                           headers={**api._headers(), **(headers or {})}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        writer = then() if then else None
        event_id = None
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith("id:"):
                event_id = int(line.removeprefix("id:").strip())
            elif line.startswith("data:"):
                event = json.loads(line.removeprefix("data:"))
                assert event["id"] == event_id
                events.append(event)
                if len(events) == count:
                    break
    if writer is not None:
        writer.join()
    return events, lines


def test_the_stream_starts_now_and_delivers_what_happens(api, gf):
    gf.create_project(ADMIN, ProjectCreate(name="before", organisation="research"))
    events, _ = _read(api, 1, then=lambda: _project_soon(gf, "late"))
    assert [(e["type"], e["subject"]["id"]) for e in events] == [("project.created", "late")]
    assert events[0]["schema"] == 1


def test_the_stream_resumes_after_last_event_id(api, gf):
    for name in ("one", "two", "three"):
        gf.create_project(ADMIN, ProjectCreate(name=name, organisation="research"))
    first, _ = _read(api, 1, params={"type": "project.created", "after": 0})
    assert first[0]["subject"]["id"] == "one"
    rest, _ = _read(api, 2, params={"type": "project.created"},
                    headers={"Last-Event-ID": str(first[0]["id"])})
    assert [e["subject"]["id"] for e in rest] == ["two", "three"]
    bad = api.get(STREAM, headers={"Last-Event-ID": "GR-1"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"


def test_a_member_streams_only_their_projects(h100s, api):
    member, operator = h100s
    create(operator, project="speech", count=1)
    mine = create(member, count=1)["code"]
    events, _ = _read(member, 1, params={"after": 0, "type": "request.*"})
    assert events[0]["subject"]["id"] == mine
    assert events[0]["labels"]["project"] == "vision"


def test_an_idle_stream_sends_heartbeats(api, gf, monkeypatch):
    monkeypatch.setattr(gf, "settings", gf.settings.model_copy(
        update={"event_stream_heartbeat_s": 0.1}))
    _, lines = _read(api, 1, then=lambda: _project_soon(gf, "late", delay_s=0.6))
    assert any(line.startswith(":") for line in lines)  # comments: the heartbeats


def test_a_revoked_token_ends_its_stream(api, gf):
    raw = api.post("/api/v1/tokens", json={"name": "watcher", "role": "operator"}).json()
    watcher = api.as_(raw["token"])
    with watcher.client.stream("GET", STREAM, headers=watcher._headers()) as response:
        revoke = threading.Timer(0.2, lambda: api.post(f"/api/v1/tokens/{raw['id']}/revoke"))
        revoke.start()
        seen = [line for line in response.iter_lines() if line.startswith("data:")]
    revoke.join()
    assert [json.loads(s.removeprefix("data:"))["type"] for s in seen] == ["token.revoked"]


def test_streams_end_cleanly_when_the_server_shuts_down(tmp_path):
    with serve_process(tmp_path / "data") as (url, token):
        lines: list[str] = []
        ended = threading.Event()

        def listen():
            with httpx.stream("GET", f"{url}{STREAM}", timeout=60,
                              headers={"Authorization": f"Bearer {token}"}) as response:
                lines.append(f"status {response.status_code}")
                for line in response.iter_lines():
                    lines.append(line)
            ended.set()

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        deadline = time.monotonic() + 20
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines == ["status 200"]
    # serve_process stopped the server (SIGTERM) and waited for it to exit: the open
    # stream did not keep it alive, and the client saw the stream end, not an error.
    assert ended.wait(10)
