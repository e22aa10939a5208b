"""The operator calls a simulated fleet needs before its agents can join.

Creating an environment that already exists answers 409, which is success here: a fleet
restarted against the same server must not fail on what its first run created. A server
that is still starting is waited for (backoff), so `gpufleet demo` can start the server
and the fleet together.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

import httpx

from gpufleet.agent.backoff import Backoff
from gpufleet.agent.client import ApiError, ServerUnavailable, get, post

from .fleet_spec import EnvironmentSpec

log = logging.getLogger(__name__)

ENVIRONMENTS_PATH = "/api/v1/environments"
JOIN_TOKENS_PATH = "/api/v1/join-tokens"
NODES_PATH = "/api/v1/nodes"
MAX_TOKENS_PER_CALL = 1000


class OperatorApiError(Exception):
    """The server refused an operator call the fleet cannot run without."""


class OperatorApi:
    def __init__(self, server_url: str, token: str, http: httpx.AsyncClient,
                 sleep: Callable[[float], Awaitable[None]], rng: random.Random):
        self.server_url = server_url.rstrip("/")
        self.token = token
        self.http = http
        self.sleep = sleep
        self.backoff = Backoff(rng=rng)

    async def _post(self, path: str, body: dict, *, conflict_ok: bool = False) -> dict | None:
        """The reply body; None for an accepted 409. Retries while the server is away."""
        return await self._call("POST", path, lambda: post(
            self.http, self.server_url + path, self.token, body), conflict_ok=conflict_ok)

    async def _get(self, path: str, params: dict) -> dict | None:
        return await self._call("GET", path, lambda: get(
            self.http, self.server_url + path, self.token, params))

    async def _call(self, method: str, path: str,
                    send: Callable[[], Awaitable[httpx.Response]], *,
                    conflict_ok: bool = False) -> dict | None:
        while True:
            try:
                response = await send()
            except ServerUnavailable as exc:
                delay_s = self.backoff.next_delay_s()
                log.warning("server unavailable (%s); retrying in %.1f s", exc, delay_s)
                await self.sleep(delay_s)
                continue
            except ApiError as exc:
                if conflict_ok and exc.status_code == 409:
                    return None
                raise OperatorApiError(f"{method} {path} refused: {exc}") from exc
            self.backoff.reset()
            try:
                return response.json()
            except ValueError as exc:
                raise OperatorApiError(f"{method} {path}: the reply is not JSON") from exc

    async def ensure_environments(self, environments: list[EnvironmentSpec]) -> None:
        for env in environments:
            body = env.model_dump(mode="json", exclude_none=True)
            created = await self._post(ENVIRONMENTS_PATH, body, conflict_ok=True)
            log.info("environment %s %s", env.name, "created" if created else "already exists")

    async def mint_join_tokens(self, environment: str, count: int) -> list[str]:
        """`count` single-use join tokens for `environment`, minted in calls of at most 1000."""
        tokens: list[str] = []
        while len(tokens) < count:
            batch = min(MAX_TOKENS_PER_CALL, count - len(tokens))
            body = {"environment": environment, "count": batch,
                    "description": f"gpufleet simulated fleet ({batch} nodes)"}
            reply = await self._post(JOIN_TOKENS_PATH, body)
            try:
                minted = [item["token"] for item in reply["tokens"]]
            except (KeyError, TypeError) as exc:
                raise OperatorApiError(f"POST {JOIN_TOKENS_PATH}: unexpected reply") from exc
            if len(minted) != batch:
                raise OperatorApiError(f"asked for {batch} join tokens for {environment}, "
                                       f"got {len(minted)}")
            tokens += minted
        return tokens

    async def retired_node_names(self) -> set[str]:
        """The nodes an operator retired: a restarted fleet must not join them again."""
        names: set[str] = set()
        cursor = None
        while True:
            params = {"status": "retired", "limit": 1000, **({"cursor": cursor} if cursor else {})}
            reply = await self._get(NODES_PATH, params)
            try:
                names |= {item["name"] for item in reply["items"]}
            except (KeyError, TypeError) as exc:
                raise OperatorApiError(f"GET {NODES_PATH}: unexpected reply") from exc
            cursor = reply.get("next_cursor")
            if not cursor:
                return names
