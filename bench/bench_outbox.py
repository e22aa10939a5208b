"""The outbox: notifications queued per second through `notify_all`, and delivery
throughput to local webhook receivers, on SQLite and PostgreSQL.

    python bench/bench_outbox.py [--database sqlite|postgres|both] [--notifications 20000]
                                 [--deliveries 2000]

Queueing: receivers as a fleet would have them (a Slack channel per two projects by
matcher, an all-critical pager, a webhook for health.*, the owners' inbox), and
notifications naming one project and one owner each, queued `--batch` per transaction
(what one evaluation round over the fleet does) and one per transaction (one change, one
notification). Each queued notification writes 2-3 outbox rows. Target: ≥ 1,000
notifications/s queued (issue 14, "Targets").

Delivery: `--deliveries` messages for each of 1 and 4 webhook receivers, served by an HTTP
server in another process (so its CPU is not ours), delivered by the sender's rounds until
none is waiting; each message is one POST and one write transaction (its delivery log).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, select, text

from common import free_port
from gpufleet.clock import SystemClock
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.outbox import notify_all
from gpufleet.services.operations.receiver_admin import create_receiver
from gpufleet.services.operations.sender import OutboxSender
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import OutboxMessage, User
from gpufleet.wire.receivers import ReceiverCreate

POSTGRES = os.environ.get("GPUFLEET_TEST_POSTGRES_URL",
                          "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TARGET_PER_S = 1000
PROJECTS = [f"project-{i}" for i in range(40)]
OWNERS = [f"user-{i}" for i in range(200)]
HOOK_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body in two writes: no 40 ms delayed ACK
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@contextmanager
def state_store(database: str):
    if database == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            store = StateStore(f"sqlite:///{Path(tmp) / 'gpufleet.db'}")
            store.migrate()
            yield store
            store.dispose()
        return
    schema = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES)
    with admin.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    store = StateStore(f"{POSTGRES}?options=-csearch_path%3D{schema}")
    try:
        store.migrate()
        yield store
    finally:
        store.dispose()
        with admin.begin() as c:
            c.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def add_fleet_receivers(store: StateStore, now) -> None:
    bodies = [ReceiverCreate(name=f"slack-{i}", kind="webhook",
                             config={"url": "http://127.0.0.1:9/x"},
                             matchers=[f"project=~{PROJECTS[2 * i]}|{PROJECTS[2 * i + 1]}"])
              for i in range(len(PROJECTS) // 2)]
    bodies += [ReceiverCreate(name="pager", kind="webhook", min_severity="critical",
                              config={"url": "http://127.0.0.1:9/p"}),
               ReceiverCreate(name="health-hook", kind="webhook", kinds=["health.*"],
                              config={"url": "http://127.0.0.1:9/h"}),
               ReceiverCreate(name="owners", kind="inbox")]
    with store.write() as s:
        for name in OWNERS:
            s.add(User(name=name, role="member", email=f"{name}@example.com", created_at=now))
        for body in bodies:
            create_receiver(s, SYSTEM, body, now)


def notifications(start: int, count: int) -> list[Notification]:
    return [Notification(
        kind="health.quarantined" if i % 3 == 0 else "alert.firing",
        severity=Severity.CRITICAL if i % 10 == 0 else Severity.WARNING,
        summary=f"unit {i} needs attention", dedup_key=f"bench-{i}",
        labels={"project": PROJECTS[i % len(PROJECTS)], "node": f"node-{i % 500}",
                "gpu": f"GPU-{i}"}, owners=(OWNERS[i % len(OWNERS)],))
        for i in range(start, start + count)]


def bench_queue(database: str, total: int, batch: int) -> None:
    clock = SystemClock()
    with state_store(database) as store:
        add_fleet_receivers(store, clock.now())
        for label, per_tx, count in ((f"batches of {batch}", batch, total),
                                     ("one per transaction", 1, min(total, 2000))):
            start = 1_000_000 if per_tx == 1 else 0
            items = notifications(start, count)
            with store.read() as s:
                before = s.scalar(select(func.count()).select_from(OutboxMessage))
            wall, cpu = time.perf_counter(), time.process_time()
            inside = 0.0  # in notify_all itself: what it adds to its cause's transaction
            for lo in range(0, count, per_tx):
                with store.write() as s:
                    started = time.perf_counter()
                    notify_all(s, items[lo:lo + per_tx], clock.now())
                    s.flush()
                    inside += time.perf_counter() - started
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            with store.read() as s:
                rows = s.scalar(select(func.count()).select_from(OutboxMessage)) - before
            rate = count / wall
            verdict = "meets" if rate >= TARGET_PER_S else "MISSES"
            print(f"{database:<8} queue {label:<22} {count:>6} notifications in {wall:6.2f} s"
                  f" ({rate:8,.0f}/s; by this process's CPU {cpu:5.2f} s:"
                  f" {count / cpu:6,.0f}/s), ~{rows / count if count else 0:.1f}"
                  f" rows each; {verdict} the {TARGET_PER_S:,}/s target); notify_all + flush"
                  f" {inside / count * 1000:.2f} ms a notification")


def bench_delivery(database: str, per_receiver: int) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", HOOK_SERVER, str(port)])
    try:
        for _ in range(100):
            try:
                httpx.post(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        for receivers in (1, 4):
            clock = SystemClock()
            with state_store(database) as store:
                now = clock.now()
                with store.write() as s:
                    for r in range(receivers):
                        create_receiver(s, SYSTEM, ReceiverCreate(
                            name=f"hook-{r}", kind="webhook",
                            config={"url": f"http://127.0.0.1:{port}/{r}"}), now)
                items = notifications(0, per_receiver)
                for lo in range(0, len(items), 1000):
                    with store.write() as s:
                        notify_all(s, items[lo:lo + 1000], now)
                sender = OutboxSender(store, Settings(outbox_receiver_batch=200), clock)
                wall, cpu = time.perf_counter(), time.process_time()
                while sender.run_once().dispatched:
                    pass
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                sender.close()
                with store.read() as s:
                    delivered = s.scalar(select(func.count()).select_from(OutboxMessage)
                                         .where(OutboxMessage.delivered_at.is_not(None)))
                assert delivered == per_receiver * receivers, delivered
                print(f"{database:<8} deliver to {receivers} webhook receiver(s): "
                      f"{delivered:>6} messages in {wall:6.2f} s ({delivered / wall:6,.0f}/s, "
                      f"CPU {cpu:5.2f} s)")
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--notifications", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--deliveries", type=int, default=2000)
    args = parser.parse_args()
    databases = ("sqlite", "postgres") if args.database == "both" else (args.database,)
    for database in databases:
        bench_queue(database, args.notifications, args.batch)
    for database in databases:
        bench_delivery(database, args.deliveries)


if __name__ == "__main__":
    main()
