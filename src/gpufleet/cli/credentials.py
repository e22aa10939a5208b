"""The login file written by `gpufleet login`: `{"url", "token"}`, readable by its owner only.

The token is a bearer secret, so the file is created with mode 600 inside a directory of
mode 700, and written to a temporary name first so a crash never leaves half a file (or a
moment where the secret sits in a file other users can read).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpufleet.settings import login_file_path

FILE_MODE = 0o600
DIR_MODE = 0o700


def save_login(url: str, token: str) -> Path:
    path = login_file_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(descriptor, "w") as stream:
        json.dump({"url": url, "token": token}, stream)
        stream.write("\n")
    os.chmod(temporary, FILE_MODE)  # O_CREAT's mode does not apply to an existing file
    os.replace(temporary, path)
    return path


def remove_login() -> Path | None:
    """Delete the login file; returns its path, or None when there was none."""
    path = login_file_path()
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path
