"""The CLI's HTTP: the standard library's urllib, one request at a time.

Why not httpx (which the server, the agent and the tests use): importing it costs a command
~0.2 s of CPU before it sends a byte, as its `__init__` loads its own command line and,
with it, Rich and Pygments — measured at twice the cost of the whole rest of a
`gpufleet fleet summary --json` (BENCHMARKS.md, "CLI start-up"). urllib costs a fifth of
that and gives what the CLI used of httpx: a timeout, TLS verified against the system's
CA store (`SSL_CERT_FILE` / `SSL_CERT_DIR` honoured), and `HTTP(S)_PROXY` / `NO_PROXY`.

`UrllibHttp.request` has the shape of `httpx.Client.request` for the few arguments the CLI
passes, and `Response` the few attributes it reads, so tests can hand the CLI an
`httpx.Client` bound to the ASGI app instead (`gpufleet.cli.client.http_factory`).

Redirects are never followed: the CLI sends its bearer token with every request, and a
redirect to another host must not receive it. A 3xx comes back as an answer (httpx's
default too), which the client reports as an error.
"""

from __future__ import annotations

import http.client
import json as json_module
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from gpufleet import __version__

USER_AGENT = f"gpufleet-cli/{__version__}"


class TransportError(Exception):
    """No answer came back; `str(error)` says why."""


class ConnectFailed(TransportError):
    """No connection: refused, no route, or a name that does not resolve."""


class TimedOut(TransportError):
    """Connected (or trying to) but no answer within the timeout."""


@dataclass(frozen=True)
class Response:
    """An answer, whatever its status."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json_module.loads(self.content)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then hands the 3xx back as an HTTPError: an answer


class UrllibHttp:
    """Requests to one server (`base_url`, no trailing slash), each on its own connection."""

    def __init__(self, base_url: str, timeout_s: float):
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirects)

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                params: Sequence[tuple[str, str]] | None = None,
                json: Any = None) -> Response:
        url = self.base_url + path + (f"?{urlencode(params, quote_via=quote)}" if params else "")
        sent_headers = {"User-Agent": USER_AGENT, **(headers or {})}
        data = None
        if json is not None:
            data = json_module.dumps(json).encode()
            sent_headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=sent_headers, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as reply:
                return Response(reply.status, reply.read())
        except urllib.error.HTTPError as answer:  # 3xx, 4xx, 5xx: still the server's answer
            with answer:
                return Response(answer.code, answer.read())
        except TimeoutError as exc:
            raise TimedOut(str(exc)) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise TimedOut(str(exc.reason)) from exc
            raise ConnectFailed(str(exc.reason)) from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise TransportError(str(exc) or type(exc).__name__) from exc


@contextmanager
def urllib_http(base_url: str, timeout_s: float) -> Iterator[UrllibHttp]:
    yield UrllibHttp(base_url, timeout_s)
