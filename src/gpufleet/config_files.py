"""Where gpufleet keeps its files, and the server URL and token a CLI command talks with.

Standard library only. `gpufleet.settings` declares every setting with pydantic-settings,
whose import alone costs a command line ~0.3 s of CPU (BENCHMARKS.md, "CLI start-up"); a
command that only talks to a server needs two of those settings, so `server_login` reads
them here, from the same sources in the same order:

  1. `GPUFLEET_URL` / `GPUFLEET_TOKEN` (names matched regardless of case, as there),
  2. `url` / `token` in the TOML file named by `GPUFLEET_CONFIG_FILE`
     (default `<config dir>/config.toml`),
  3. the login file written by `gpufleet login`,
  4. the default URL, and no token.

`tests/test_config_files.py` holds the two readers to the same answers. A setting the
command does not use (say `GPUFLEET_PORT=http`) is not its concern: `gpufleet config show`
and `gpufleet serve` still refuse it.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.private_files import write_private_file

ENV_PREFIX = "GPUFLEET_"
DEFAULT_SERVER_URL = "http://127.0.0.1:8080"
LOGIN_KEYS = ("url", "token")


class SettingsFileError(ValueError):
    """A settings file that was asked for but cannot be used."""


def config_dir() -> Path:
    """Where the CLI keeps its config and login files (XDG, overridable for tests)."""
    explicit = os.environ.get("GPUFLEET_CONFIG_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpufleet"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpufleet"


def config_file_path() -> Path:
    explicit = os.environ.get(f"{ENV_PREFIX}CONFIG_FILE")
    return Path(explicit) if explicit else config_dir() / "config.toml"


def login_file_path() -> Path:
    return config_dir() / "login.json"


def config_file_to_read() -> Path | None:
    """The TOML file to read, None when there is none; one named by `GPUFLEET_CONFIG_FILE`
    must exist (a typo in its name would otherwise silently mean "no settings")."""
    path = config_file_path()
    if path.is_file():
        return path
    if os.environ.get(f"{ENV_PREFIX}CONFIG_FILE"):
        raise SettingsFileError(f"{ENV_PREFIX}CONFIG_FILE names {path}, which is not a file")
    return None


def read_login_file() -> dict[str, str]:
    """The non-empty `url` and `token` stored by `gpufleet login`; {} when there is no
    readable login (an unreadable one is no login, not an error)."""
    try:
        data = json.loads(login_file_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: value for key, value in data.items() if key in LOGIN_KEYS and value}


def store_login(url: str, token: str) -> Path:
    """Write the CLI's login file (mode 600 in a 700 directory); returns its path."""
    path = login_file_path()
    write_private_file(path, json.dumps({"url": url, "token": token}, indent=2) + "\n")
    return path


def stored_login_url() -> str | None:
    """The server URL of the stored login, if there is a readable one."""
    url = read_login_file().get("url")
    return url if isinstance(url, str) else None


@dataclass(frozen=True)
class ServerLogin:
    """The server a CLI command talks to and the bearer token it sends (None: none set).
    The token is kept out of `repr`, so a traceback or a log line cannot show it."""

    url: str
    token: str | None = field(repr=False)


def _environment_value(name: str) -> str | None:
    exact = os.environ.get(name)
    if exact is not None:
        return exact
    wanted = name.lower()
    return next((value for key, value in os.environ.items() if key.lower() == wanted), None)


def _config_file_values() -> dict[str, Any]:
    path = config_file_to_read()
    if path is None:
        return {}
    try:
        values = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsFileError(f"cannot read the settings file {path}: {exc}") from None
    for key in LOGIN_KEYS:
        if key in values and not isinstance(values[key], str):
            raise SettingsFileError(f"invalid setting: {key} in {path} must be text")
    return values


def server_login() -> ServerLogin:
    """The URL and token from the environment, the config file, the login file or the
    default, highest first (the module docstring has the why)."""
    from_file = _config_file_values()
    from_login = read_login_file()
    found: dict[str, str] = {}
    for key in LOGIN_KEYS:
        value = _environment_value(f"{ENV_PREFIX}{key.upper()}")
        if value is None:
            value = from_file.get(key, from_login.get(key))
        if value is not None:
            found[key] = value
    return ServerLogin(url=found.get("url", DEFAULT_SERVER_URL), token=found.get("token"))
