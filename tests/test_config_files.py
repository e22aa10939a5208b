"""The CLI's light reading of the server URL and token agrees with the declared settings.

`gpufleet.config_files.server_login` reads what `gpufleet.settings.load_settings` reads for
`url` and `token`, without pydantic-settings; these tests hold the two to the same answers
source by source, so neither can drift.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.config_files import ServerLogin, SettingsFileError, server_login
from gpufleet.settings import load_settings

ENV_URL, FILE_URL, LOGIN_URL = "http://env.example", "http://file.example", "http://login"


def write_login(url: str | None, token: str | None) -> None:
    login = Path(os.environ["GPUFLEET_CONFIG_DIR"]) / "login.json"
    login.parent.mkdir(parents=True, exist_ok=True)
    login.write_text(json.dumps({"url": url, "token": token}))


def settings_login() -> ServerLogin:
    settings = load_settings()
    return ServerLogin(settings.url,
                       None if settings.token is None else settings.token.get_secret_value())


SCENARIOS = {
    "nothing set": ({}, "", None),
    "environment only": ({"GPUFLEET_URL": ENV_URL, "GPUFLEET_TOKEN": "gfa_env"}, "", None),
    "lower-case environment": ({"gpufleet_url": ENV_URL}, "", None),
    "empty environment token": ({"GPUFLEET_TOKEN": ""}, 'token = "gfa_file"\n', None),
    "file only": ({}, f'url = "{FILE_URL}"\ntoken = "gfa_file"\nport = 9000\n', None),
    "login only": ({}, "", (LOGIN_URL, "gfa_login")),
    "login with an empty url": ({}, "", ("", "gfa_login")),
    "environment over file over login": (
        {"GPUFLEET_URL": ENV_URL}, 'token = "gfa_file"\n', (LOGIN_URL, "gfa_login")),
    "file over login": ({}, f'url = "{FILE_URL}"\n', (LOGIN_URL, "gfa_login")),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_readers_give_the_same_url_and_token(scenario, tmp_path, monkeypatch):
    env, file_text, login = SCENARIOS[scenario]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config_file = tmp_path / "config.toml"
    config_file.write_text(file_text)
    monkeypatch.setenv("GPUFLEET_CONFIG_FILE", str(config_file))
    if login:
        write_login(*login)
    assert server_login() == settings_login()


def test_a_named_config_file_that_is_missing_is_refused_by_both(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_CONFIG_FILE", str(tmp_path / "nope.toml"))
    with pytest.raises(SettingsFileError, match=r"nope\.toml"):
        server_login()
    with pytest.raises(SettingsFileError, match=r"nope\.toml"):
        load_settings()


def test_the_token_is_never_in_the_repr():
    assert "gfa_secret" not in repr(ServerLogin("http://x", "gfa_secret"))


# --- what a client command makes of the files ---------------------------------------------------

runner = CliRunner()


def one_error_line(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    return line


def test_a_config_file_that_is_not_toml_is_one_error_line(tmp_path, monkeypatch):
    broken = tmp_path / "broken.toml"
    broken.write_text("this is [not toml\n")
    monkeypatch.setenv("GPUFLEET_CONFIG_FILE", str(broken))
    for command in (["fleet", "summary"], ["config", "show"]):
        assert one_error_line(*command).startswith(
            f"error: cannot read the settings file {broken}: ")


def test_a_url_that_is_not_text_is_one_error_line(tmp_path, monkeypatch):
    config_file = tmp_path / "config.toml"
    config_file.write_text("url = 8080\n")
    monkeypatch.setenv("GPUFLEET_CONFIG_FILE", str(config_file))
    assert one_error_line("whoami") == f"error: invalid setting: url in {config_file} must be text"


def test_a_client_command_ignores_a_server_setting_it_does_not_use(cli_in_process,
                                                                   monkeypatch):
    monkeypatch.setenv("GPUFLEET_PORT", "eighty")
    result = runner.invoke(app, ["whoami", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["role"] == "admin"
    assert "invalid setting: port" in one_error_line("config", "show")
