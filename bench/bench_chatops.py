"""`/gpu` reply times against a real server: is every verb far inside Slack's 3 s?

    python bench/bench_chatops.py --database sqlite   --rounds 50
    python bench/bench_chatops.py --database postgres --rounds 50

Starts `gpufleet serve` in its own process with a Slack signing secret, registers a small
fleet (4 nodes × 8 H100) through the agent API, links a Slack user to the bootstrap admin,
then, as Slack would, posts signed slash commands over HTTP: per round a `request`, its
`status` and `why`, `mine`, and its `release` (after an approval through the API), then a
few `idle`. Prints per-verb latency as the client saw it and as the server timed it
(`Server-Timing`). Every reply must be a 200 with a message (no refusals are timed: a
request is checked to be created). docs/chatops.md, "Answering within three seconds".
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import registration

from common import describe_ms, running_server, server_ms

SECRET = "bench-signing-secret"
POSTGRES = os.environ.get("GPUFLEET_BENCH_POSTGRES_URL",
                          "postgresql+psycopg://postgres@127.0.0.1:5432/gpufleet_bench_chatops")


def signed(body: bytes) -> dict[str, str]:
    timestamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": "v0=" +
            digest.hexdigest(), "Content-Type": "application/x-www-form-urlencoded"}


def fresh_postgres() -> str:
    base, name = POSTGRES.rsplit("/", 1)
    admin = create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return POSTGRES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    database_url = fresh_postgres() if args.database == "postgres" else None
    with tempfile.TemporaryDirectory() as data_dir, running_server(
            Path(data_dir), database_url, slack_signing_secret=SECRET) as (url, token):
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        slack = httpx.Client(base_url=url)
        admin.post("/api/v1/environments", json={"name": "onprem-hpc", "kind": "onprem"})
        for node in range(1, 5):
            join = admin.post("/api/v1/join-tokens", json={"environment": "onprem-hpc"})
            agent = httpx.Client(base_url=url, headers={
                "Authorization": f"Bearer {join.json()['tokens'][0]['token']}"})
            assert agent.post("/api/v1/agent/register",
                              json=registration(node)).status_code == 200
        admin.post("/api/v1/projects", json={"name": "vision", "organisation": "r"})
        assert admin.post("/api/v1/chatops/identities", json={
            "platform": "slack", "team_id": "T0BENCH", "chat_user_id": "U0BENCH",
            "user": "admin"}).status_code == 201
        client_ms: dict[str, list[float]] = {}
        server: dict[str, list[float]] = {}

        def gpu(verb: str, words: str) -> dict:
            body = urlencode({"command": "/gpu", "text": words, "user_id": "U0BENCH",
                              "team_id": "T0BENCH", "channel_id": "C0BENCH"}).encode()
            started = time.perf_counter()
            response = slack.post("/api/v1/chatops/slack/commands", content=body,
                                  headers=signed(body))
            client_ms.setdefault(verb, []).append((time.perf_counter() - started) * 1000)
            server.setdefault(verb, []).append(server_ms(response))
            assert response.status_code == 200, response.text
            return response.json()

        for _ in range(args.rounds):
            created = gpu("request", 'request 1 H100-80GB --project vision --reason "bench"')
            code = created["text"].split()[0]
            assert code.startswith("GR-"), created
            gpu("status", f"status {code}")
            gpu("why", f"why {code}")
            gpu("mine", "mine")
            if created["text"].split()[1] == "pending":
                admin.post(f"/api/v1/requests/{code}/approve", json={})
            released = gpu("release", f"release {code}")
            assert "released" in released["text"], released
        for _ in range(5):
            gpu("idle", "idle")
        print(f"{args.database}: {args.rounds} rounds, 4 nodes x 8 H100")
        for verb in client_ms:
            print(f"  {verb:8s} client {describe_ms(client_ms[verb])}")
            print(f"  {'':8s} server {describe_ms(server[verb])}")


if __name__ == "__main__":
    main()
