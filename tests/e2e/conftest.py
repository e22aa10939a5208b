"""A real browser against a real server: Debian's Chromium driven by Playwright, one browser
and one `gpufleet serve` (on the fleet of tests/e2e/world.py) for the whole session.

Chromium is the system's (`apt-get install chromium`), never one Playwright downloads: the
tests find it on PATH. Without it (or without the `playwright` package) they skip with the
reason; with GPUFLEET_TEST_REQUIRE_CHROMIUM=1 (.ci/run sets it) they fail instead.

Every page a test opens is watched: a request to another host, a console error (a
Content-Security-Policy refusal is one) or an uncaught script error fails the test. Each
test's screenshots go to GPUFLEET_E2E_ARTIFACTS (default tests/e2e/artifacts/, git-ignored).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import private_postgres_schema
from tests.e2e.world import World, seed
from tests.serve_process import serve_process

# Read at import: the suite's autouse fixture clears GPUFLEET_* variables before each test.
REQUIRED = os.environ.get("GPUFLEET_TEST_REQUIRE_CHROMIUM") == "1"
ARTIFACTS = Path(os.environ.get("GPUFLEET_E2E_ARTIFACTS")
                 or Path(__file__).parent / "artifacts")
PORTS = range(8720, 8730)  # tried first, so a developer knows where to look
# The seeded nodes send no heartbeats: kept `ready` for the session (1000 h), so placement
# and the health section see the fleet as seeded.
SERVER_SETTINGS = {"heartbeat_interval_s": 3600, "unreachable_after_missed_heartbeats": 1000}
VIEWPORT = {"width": 1280, "height": 900}


def _unavailable(reason: str):
    if REQUIRED:
        pytest.fail(f"{reason} (GPUFLEET_TEST_REQUIRE_CHROMIUM=1: the browser tests must run)")
    pytest.skip(reason)


def _port() -> int | None:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return None  # serve_process picks any free one


@dataclass(frozen=True)
class Server:
    url: str
    world: World

    def api(self, token: str, path: str, **params) -> dict:
        """The API's JSON for `path`, as `token`'s holder."""
        reply = httpx.get(f"{self.url}{path}", params=params, timeout=30,
                          headers={"Authorization": f"Bearer {token}"})
        assert reply.status_code == 200, f"{path}: {reply.status_code} {reply.text}"
        return reply.json()


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        _unavailable("Chromium is not installed: apt-get install chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is missing: pip install -e '.[test]'")
    return path


@pytest.fixture(scope="package",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server(request, chromium_path, tmp_path_factory) -> Iterator[Server]:
    """`gpufleet serve` on the seeded world, its state in SQLite or in a private schema of
    the test PostgreSQL (skipped without GPUFLEET_TEST_POSTGRES_URL, as tests/conftest.py
    does)."""
    with ExitStack() as stack:
        database = {}
        if request.param == "postgres":
            database["database_url"] = stack.enter_context(private_postgres_schema("gpufleet_e2e"))
        data_dir = tmp_path_factory.mktemp("e2e") / "data"
        world = seed(data_dir, **database)
        config_dir = tmp_path_factory.mktemp("e2e-config")
        url, _ = stack.enter_context(serve_process(
            data_dir, port=_port(), config_dir=config_dir, **SERVER_SETTINGS, **database))
        yield Server(url, world)


# Package scope, not session: Playwright's sync API runs an event loop in this thread while
# it is open, and asyncio.run() in the tests after tests/e2e/ refuses to start under it.
@pytest.fixture(scope="package")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path)
        yield browser
        browser.close()


@dataclass
class Watch:
    """What the pages of one browser context did that they must not."""

    origin: str
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)

    def attach(self, page) -> None:
        page.on("request", self._request)
        page.on("response", self._response)
        page.on("console", lambda m: self._console(m, page))
        page.on("pageerror", lambda e: self.errors.append(f"script: {e} ({page.url})"))

    def _request(self, request) -> None:
        self.requested.append(request.url)
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob", "about"):
            return
        if f"{parts.scheme}://{parts.netloc}" != self.origin:
            self.foreign.append(request.url)

    def _response(self, response) -> None:
        # A page's own status is the test's to check (a 401, a 404 page); what it loads
        # must load. Chromium asks for /favicon.ico by itself on a page that names no icon
        # (the API's JSON); the dashboard's pages name /ui/static/favicon.svg.
        kind = response.request.resource_type
        if response.status >= 400 and kind not in ("document", "fetch", "xhr") and \
                urlsplit(response.url).path != "/favicon.ico":
            self.errors.append(f"{kind} {response.url}: {response.status}")

    def _console(self, message, page) -> None:
        # "Failed to load resource" repeats a status seen (and judged) in _response.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(f"console: {message.text} ({page.url})")

    def check(self) -> None:
        assert self.foreign == [], f"requests to other hosts: {self.foreign}"
        assert self.errors == [], "\n".join(self.errors)


@pytest.fixture
def new_page(browser, server) -> Iterator:
    """`new_page(color_scheme="light")`: a page in a fresh browser context (its own
    cookies: one signed-in person), watched until the test ends."""
    contexts, watches = [], []

    def make(color_scheme: str = "light"):
        context = browser.new_context(base_url=server.url, viewport=VIEWPORT,
                                      timezone_id="UTC",
                                      color_scheme=color_scheme)
        context.set_default_timeout(15_000)
        contexts.append(context)
        watch = Watch(server.url)
        watches.append(watch)
        page = context.new_page()
        watch.attach(page)
        page.watch = watch
        return page

    yield make
    for context in contexts:
        context.close()
    for watch in watches:
        watch.check()


def sign_in(page, token: str, path: str = "/ui/"):
    """Sign in through the form, as a person does: type the token, press Enter."""
    page.goto(path)
    page.get_by_label("API token").fill(token)
    page.get_by_label("API token").press("Enter")
    page.wait_for_url(f"**{path}")
    page.get_by_role("button", name="Sign out").wait_for()
    return page


def screenshot(page, name: str, full_page: bool = True) -> Path:
    """A PNG in the artefacts folder (docs/dashboard.md, "Screenshots"): the full page, or
    the first screen of a page too long to look at whole (`full_page=False`)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=path, full_page=full_page)
    return path


def open_page(page, path: str):
    """Open a dashboard page; the framework's plain 404 (no route, not a dashboard page
    saying what was not found) fails at once with the path."""
    response = page.goto(path)
    assert not (response.status == 404 and
                "text/html" not in response.headers.get("content-type", "")), \
        f"no dashboard route for {path}"
    return response
