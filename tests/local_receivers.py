"""Stand-ins for services outside the machine, as real servers on localhost: an HTTP
receiver (webhooks, Slack's incoming webhooks and Web API), an SMTP server (aiosmtpd) and
a real Alertmanager (Debian's prometheus-alertmanager).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)


class LocalHttpReceiver:
    """Records every request; answers with `respond(received)` (default 200 "ok").
    `hold` (an Event) keeps every answer until it is set: a receiver that hangs."""

    def __init__(self, respond: Callable[[Received], Reply] | None = None):
        self.received: list[Received] = []
        self.respond = respond or (lambda _r: Reply())
        self.hold: threading.Event | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no 40 ms delayed ACK between header and body

            def do_POST(self):
                self._answer()

            def do_GET(self):
                self._answer()

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                got = Received(self.command, self.path,
                               {k.lower(): v for k, v in self.headers.items()},
                               self.rfile.read(length))
                receiver.received.append(got)
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                reply = receiver.respond(got)
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except OSError:  # the client gave up (a timeout under test)
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHttpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def local_smtp(login: tuple[str, str] | None = None,
               tls: ssl.SSLContext | None = None) -> Iterator[list]:
    """An aiosmtpd server on a free port; yields (port, envelopes received). With `login`
    (user, password) it requires AUTH, over plain SMTP unless `tls` is given; with `tls`
    (the server's context) it requires STARTTLS before anything is sent, and each
    envelope records whether it came over TLS (`envelope.over_tls`)."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    class Keep:
        def __init__(self):
            self.envelopes = []

        async def handle_DATA(self, server, session, envelope):
            envelope.over_tls = session.ssl is not None
            self.envelopes.append(envelope)
            return "250 OK"

    def authenticate(server, session, envelope, mechanism, auth_data):
        given = (auth_data.login.decode(), auth_data.password.decode())
        return AuthResult(success=given == login)

    handler = Keep()
    auth = ({"authenticator": authenticate, "auth_required": True,
             "auth_require_tls": tls is not None} if login else {})
    if tls is not None:
        auth.update(tls_context=tls, require_starttls=True)
    controller = Controller(handler, hostname="127.0.0.1", port=free_port(), **auth)
    controller.start()
    try:
        yield controller.port, handler.envelopes
    finally:
        controller.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ALERTMANAGER_ENV = "GPUFLEET_TEST_REQUIRE_ALERTMANAGER"


def alertmanager_binary() -> str | None:
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@contextmanager
def real_alertmanager(tmp_path: Path) -> Iterator[str]:
    """Debian's prometheus-alertmanager on a free port with a minimal config; yields its
    URL. Skips only when the binary is missing and ALERTMANAGER_ENV is unset (`.ci/run`
    sets it, so CI fails instead)."""
    binary = alertmanager_binary()
    if binary is None:
        if os.environ.get(ALERTMANAGER_ENV):
            pytest.fail(f"{ALERTMANAGER_ENV} is set but prometheus-alertmanager is missing")
        pytest.skip("prometheus-alertmanager is not installed (apt-get install "
                    "prometheus-alertmanager; .ci/run does)")
    config = tmp_path / "alertmanager.yml"
    config.write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port, cluster_port = free_port(), free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
         f"--cluster.advertise-address=127.0.0.1:{cluster_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            if process.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {process.stderr.read().decode()}")
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError("alertmanager did not become ready")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
