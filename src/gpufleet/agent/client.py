"""HTTP client for the agent endpoints of the server (docs/design.md, "Architecture").

Failures are translated at this boundary into one small tree, so callers decide by kind
(retry, stop, report) and never by httpx exception or status code:

    AgentError
    ├── ServerUnavailable   no answer, a timeout, 5xx or 429: try again later, with backoff
    └── ApiError            the server refused the request (4xx): code, message, details
        └── TokenRejected   the token cannot do this — retrying cannot help
            ├── Unauthorized   401: the join token is unknown, expired or used, or the
            │                  node credential was revoked
            └── Forbidden      403: e.g. the credential belongs to another machine

The server's error body is `{"error": {"code", "message", "details"}}` (docs/design.md,
"Interfaces").

Several servers (replicas behind no proxy, docs/deployment.md): `AgentClient` takes a list of
URLs and stays on the one that last answered. When it cannot be reached or answers 502, 503
or 504 (`ServerUnavailable.failover`), the same request goes to the next URL at once, each
URL at most once per request; only when none answers does the caller see ServerUnavailable
(and back off). The request is the same bytes with the same credential, so a telemetry
batch replayed on another replica keeps its batch id (exactly once: docs/deployment.md,
"Agents").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from gpufleet.wire.agent import Heartbeat, HeartbeatReply, NodeRegistration, RegistrationReply
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, TelemetryAck

REGISTER_PATH = "/api/v1/agent/register"
HEARTBEAT_PATH = "/api/v1/agent/heartbeat"

ReplyT = TypeVar("ReplyT", bound=BaseModel)
# Answers that say "this replica cannot, another may": a proxy without a live upstream
# (502, 504) or a server that cannot answer now (503).
FAILOVER_STATUSES = frozenset((502, 503, 504))

log = logging.getLogger(__name__)


class AgentError(Exception):
    pass


class ServerUnavailable(AgentError):
    """The server could not be reached or could not answer now. `failover`: another
    server (replica) may answer instead — no connection, a timeout, 502, 503 or 504."""

    def __init__(self, message: str, *, failover: bool = False):
        super().__init__(message)
        self.failover = failover


class ApiError(AgentError):
    def __init__(self, status_code: int, code: str, message: str,
                 details: dict[str, Any] | None = None):
        super().__init__(f"{code}: {message} (HTTP {status_code})")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.details = details or {}


class TokenRejected(ApiError):
    pass


class Unauthorized(TokenRejected):
    pass


class Forbidden(TokenRejected):
    pass


def error_from_response(response: httpx.Response) -> AgentError:
    """The AgentError for a non-2xx response, read from the canonical error body if any."""
    status = response.status_code
    if status >= 500 or status in (408, 429):
        return ServerUnavailable(f"{response.request.url} answered HTTP {status}",
                                 failover=status in FAILOVER_STATUSES)
    code, message, details = f"http_{status}", response.reason_phrase or "request refused", {}
    try:
        error = response.json()["error"]
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        details = error.get("details") if isinstance(error.get("details"), dict) else {}
    except (ValueError, KeyError, TypeError, AttributeError):
        text = response.text.strip()
        message = text[:200] if text else message
    cls = {401: Unauthorized, 403: Forbidden}.get(status, ApiError)
    return cls(status, code, message, details)


async def post(http: httpx.AsyncClient, url: str, bearer: str,
               body: BaseModel | dict | bytes,
               headers: dict[str, str] | None = None) -> httpx.Response:
    """POST with a bearer token: a model or dict as JSON, bytes as they are (with the
    caller's `headers`); the 2xx response, or the AgentError for anything else."""
    headers = {"Authorization": f"Bearer {bearer}", **(headers or {})}
    try:
        if isinstance(body, bytes):
            response = await http.post(url, content=body, headers=headers)
        elif isinstance(body, BaseModel):
            headers["Content-Type"] = "application/json"
            response = await http.post(url, content=body.model_dump_json(exclude_none=True),
                                       headers=headers)
        else:
            response = await http.post(url, json=body, headers=headers)
    except httpx.TransportError as exc:
        raise ServerUnavailable(f"{url}: {type(exc).__name__}: {exc}", failover=True) from exc
    if not response.is_success:
        raise error_from_response(response)
    return response


async def get(http: httpx.AsyncClient, url: str, bearer: str,
              params: dict | None = None) -> httpx.Response:
    """GET with a bearer token; the 2xx response, or the AgentError for anything else."""
    try:
        response = await http.get(url, params=params,
                                  headers={"Authorization": f"Bearer {bearer}"})
    except httpx.TransportError as exc:
        raise ServerUnavailable(f"{url}: {type(exc).__name__}: {exc}", failover=True) from exc
    if not response.is_success:
        raise error_from_response(response)
    return response


def parse_reply(response: httpx.Response, model: type[ReplyT]) -> ReplyT:
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ApiError(response.status_code, "invalid_reply",
                       f"the server's reply is not a {model.__name__}: {exc}") from exc


GZIP_JSON = {"Content-Type": "application/json", "Content-Encoding": "gzip"}


def server_urls(servers: str | Sequence[str]) -> list[str]:
    """The server URLs, in order: each entry may itself be comma-separated (`--server a,b`
    or `--server a --server b`); blanks and repeats dropped, trailing slashes cut. Raises
    ValueError for none, or for one that is not an http(s) URL."""
    entries = [servers] if isinstance(servers, str) else list(servers)
    urls: list[str] = []
    for entry in entries:
        for part in entry.split(","):
            url = part.strip().rstrip("/")
            if not url or url in urls:
                continue
            if not url.lower().startswith(("http://", "https://")):
                raise ValueError(f"server URL '{url}' must start with http:// or https://")
            urls.append(url)
    if not urls:
        raise ValueError("no server URL given")
    return urls


class AgentClient:
    """The agent endpoints, on one server or several replicas (failover: the module's
    docstring). The httpx client is the caller's, so many agents in one process can share
    one connection pool."""

    def __init__(self, servers: str | Sequence[str], http: httpx.AsyncClient):
        self.server_urls = server_urls(servers)
        self._current = 0
        self.http = http

    @property
    def server_url(self) -> str:
        """The server the next request goes to first: the one that last answered."""
        return self.server_urls[self._current]

    async def _on_any_server(self, send: Callable[[str], Awaitable[httpx.Response]]
                             ) -> httpx.Response:
        """`send(base_url)` on the current server, then on each other one once while the
        answer allows failover; the last ServerUnavailable when none answered."""
        unavailable: ServerUnavailable | None = None
        for _ in self.server_urls:
            try:
                return await send(self.server_url)
            except ServerUnavailable as exc:
                if not exc.failover:
                    raise
                unavailable = exc
                if len(self.server_urls) > 1:
                    self._current = (self._current + 1) % len(self.server_urls)
                    log.warning("%s; trying %s", exc, self.server_url)
        assert unavailable is not None
        raise unavailable

    async def _post(self, path: str, bearer: str, body: BaseModel | bytes,
                    headers: dict[str, str] | None = None) -> httpx.Response:
        return await self._on_any_server(
            lambda base: post(self.http, base + path, bearer, body, headers))

    async def register(self, bearer: str, registration: NodeRegistration) -> RegistrationReply:
        """Register (or re-register) the node with a join token or its node credential."""
        response = await self._post(REGISTER_PATH, bearer, registration)
        return parse_reply(response, RegistrationReply)

    async def heartbeat(self, credential: str, heartbeat: Heartbeat) -> HeartbeatReply:
        response = await self._post(HEARTBEAT_PATH, credential, heartbeat)
        return parse_reply(response, HeartbeatReply)

    async def upload_telemetry(self, credential: str, payload: bytes) -> TelemetryAck:
        """POST one encoded batch (`telemetry_batch.encode`: gzip JSON). The ack comes only
        once the samples are durable; `duplicate` (the id was stored before) is an ack too.
        """
        response = await self._post(TELEMETRY_BATCHES_PATH, credential, payload,
                                    headers=GZIP_JSON)
        return parse_reply(response, TelemetryAck)
