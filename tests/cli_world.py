"""The CLI talking to the test app: the `cli_in_process` fixture.

conftest.py loads this module as a plugin. tests/cli/test_cli.py keeps its own `cli` fixture
(it also runs the CLI against a real server).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from gpufleet.cli import client as cli_client


@pytest.fixture
def cli_in_process(client, admin_token, monkeypatch) -> None:
    """The CLI as the bootstrap admin, every HTTP call through the test app."""

    @contextmanager
    def through_test_app(_base_url: str):
        yield client

    monkeypatch.setattr(cli_client, "http_factory", through_test_app)
    monkeypatch.setenv("GPUFLEET_TOKEN", admin_token)
