"""`kill -9` of a real server while it is sending: the message is sent again by the next
server on the same state store (at least once), because the rows are the only state."""

from __future__ import annotations

import threading
import time

import httpx

from tests.local_receivers import LocalHttpReceiver
from tests.serve_process import serve_process


def _wait_for(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def test_a_message_in_flight_at_kill_9_is_sent_after_restart(tmp_path):
    settings = {"outbox_send_interval_s": 0.2, "outbox_receiver_batch": 1,
                "outbox_receiver_timeout_s": 2}
    with LocalHttpReceiver() as hook:
        hook.hold = threading.Event()
        processes = []
        with serve_process(tmp_path, on_start=processes.append, **settings) as (url, token):
            headers = {"Authorization": f"Bearer {token}"}
            created = httpx.post(f"{url}/api/v1/receivers", headers=headers, json={
                "name": "hook", "kind": "webhook", "config": {"url": hook.url}})
            assert created.status_code == 201, created.text
            assert httpx.post(f"{url}/api/v1/receivers/hook/test",
                              headers=headers).status_code == 202
            _wait_for(lambda: len(hook.received) == 1, "the first send reached the receiver")
            processes[0].kill()  # SIGKILL: no shutdown, nothing recorded
            processes[0].wait()
        hook.hold.set()  # answers go nowhere: the sender that asked is dead
        with serve_process(tmp_path, **settings) as (url, token):
            headers = {"Authorization": f"Bearer {token}"}

            def delivered() -> bool:
                log = httpx.get(f"{url}/api/v1/receivers/hook/deliveries",
                                headers=headers).json()["items"]
                return any(d["ok"] for d in log)

            _wait_for(delivered, "the restarted server delivered the message")
    keys = {r.headers["idempotency-key"] for r in hook.received}
    assert len(hook.received) >= 2 and len(keys) == 1
