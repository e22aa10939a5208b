"""A small synchronous client for the gpufleet REST API.

The server URL and token come from `gpufleet.config_files.server_login()` (the same sources
as `gpufleet.settings`, without its cost), so the `GPUFLEET_URL` / `GPUFLEET_TOKEN`
environment variables override what `gpufleet login` stored. Every failure leaves here as
a `CliError`: the server's error body becomes an `ApiError`, a refused connection a
`ServerUnreachable` naming the URL and what to do.

`http_factory` is the one seam to the network (`gpufleet.cli.http`, standard library): tests
replace it with an `httpx.Client` bound to the ASGI app, to run the CLI in-process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlsplit

from gpufleet.cli.errors import ApiError, CliError, NotLoggedIn, ServerUnreachable
from gpufleet.cli.http import ConnectFailed, TimedOut, TransportError, urllib_http
from gpufleet.config_files import ServerLogin, SettingsFileError, config_file_path, server_login

if TYPE_CHECKING:
    from gpufleet.settings import Settings

TIMEOUT_S = 30.0
Params = list[tuple[str, str]]


class HttpResponse(Protocol):
    status_code: int

    @property
    def content(self) -> bytes: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


class Http(Protocol):
    """What the client needs of a connection: `gpufleet.cli.http.UrllibHttp`, or in tests
    an `httpx.Client`."""

    def request(self, method: str, url: str, **kwargs: Any) -> HttpResponse: ...


HttpFactory = Callable[[str], AbstractContextManager[Http]]


def _network_http(base_url: str) -> AbstractContextManager[Http]:
    return urllib_http(base_url, TIMEOUT_S)


http_factory: HttpFactory = _network_http


def api_path(*segments: object) -> str:
    """`/api/v1/<segments>`, each quoted: a name typed by a person never changes the route."""
    return "/api/v1/" + "/".join(quote(str(segment), safe="") for segment in segments)


def _unreachable(url: str) -> ServerUnreachable:
    return ServerUnreachable(f"cannot reach the gpufleet server at {url} (is it running? "
                             "set GPUFLEET_URL or run `gpufleet login`)")


def _error_from(response: HttpResponse) -> ApiError:
    """The server's canonical error body as an `ApiError`; anything else, summarised."""
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        details = error.get("details") or {}
    except (ValueError, KeyError, TypeError):
        text = response.text.strip().replace("\n", " ")[:200]
        return ApiError(response.status_code, "http_error",
                        f"HTTP {response.status_code} from the server: {text or 'no body'}")
    hint = "run `gpufleet login` or set GPUFLEET_TOKEN" if response.status_code == 401 else None
    return ApiError(response.status_code, code, message, details, hint)


class ApiClient:
    """One server and one token; `get` / `post` / `put` / `delete` return decoded JSON or
    raise `CliError`."""

    def __init__(self, http: Http, url: str, token: str):
        self.http = http
        self.url = url
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def get(self, path: str, params: Params | None = None) -> Any:
        return self._send("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._send("POST", path, json=body)

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("PUT", path, json=body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("PATCH", path, json=body)

    def delete(self, path: str) -> Any:
        return self._send("DELETE", path)

    def pages(self, path: str, params: Params, *, follow: bool) -> dict[str, Any]:
        """A listing's first page, or with `follow` every page merged into one.

        The merged result keeps the API's page shape (`items`, `next_cursor: null`) so
        `--json` output reads the same whether or not `--all` was given.
        """
        page = self.get(path, params)
        items = list(page["items"])
        while follow and page.get("next_cursor"):
            page = self.get(path, [*params, ("cursor", page["next_cursor"])])
            items.extend(page["items"])
        return {**page, "items": items}

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, headers=self._headers, **kwargs)
        except ConnectFailed as exc:
            raise _unreachable(self.url) from exc
        except TimedOut as exc:
            raise ServerUnreachable(f"the gpufleet server at {self.url} did not answer "
                                    f"within {TIMEOUT_S:.0f} s") from exc
        except TransportError as exc:
            raise CliError(f"talking to the gpufleet server at {self.url} failed: {exc}") from exc
        if not 200 <= response.status_code < 300:  # a 3xx too: redirects are not followed
            raise _error_from(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(f"{self.url} answered {method} {path} with something that is not "
                           "JSON; is that a gpufleet server?") from exc


@contextmanager
def settings_errors() -> Iterator[None]:
    """An invalid setting (say `GPUFLEET_PORT=http`) as one `CliError` naming it."""
    import tomllib

    from pydantic import ValidationError  # only the commands that load every setting pay

    try:
        yield
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}"
                             for e in exc.errors())
        raise CliError(f"invalid setting: {problems}") from None
    except SettingsFileError as exc:
        raise CliError(str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"cannot read the settings file {config_file_path()}: {exc}") from None


def cli_settings(**overrides: Any) -> Settings:
    """`load_settings(**overrides)`, failing as one clear line (for `serve`: a command that
    talks to a server reads only its URL and token, with `connect`)."""
    from gpufleet.settings import load_settings

    with settings_errors():
        return load_settings(**overrides)


def configured_login() -> ServerLogin:
    """The configured server URL and token, or one `CliError` naming the unusable file."""
    try:
        return server_login()
    except SettingsFileError as exc:
        raise CliError(str(exc)) from None


def _checked_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"server URL '{url}' must start with http:// or https://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks it
    except ValueError as exc:
        raise CliError(f"server URL '{url}' is not a valid URL: {exc}") from None
    if not parts.hostname:
        raise CliError(f"server URL '{url}' names no host")
    return url


@contextmanager
def connect_to(url: str, token: str) -> Iterator[ApiClient]:
    """A client for an explicit URL and token (what `gpufleet login` verifies)."""
    url = _checked_url(url)
    with http_factory(url) as http:
        yield ApiClient(http, url, token)


@contextmanager
def connect() -> Iterator[ApiClient]:
    """A client for the configured server: flags aside, env beats config file beats login."""
    login = configured_login()
    if not login.token:
        raise NotLoggedIn("no API token: run `gpufleet login --url URL` or set GPUFLEET_TOKEN")
    with connect_to(login.url, login.token) as api:
        yield api
