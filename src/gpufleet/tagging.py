"""`gpufleet.tag(...)`: a workload names its own context for the node agent (docs/design.md,
"Concepts").

    import gpufleet
    gpufleet.tag(allocation="GR-1042", model="llama-3-8b", dataset="c4")

A process's environment is fixed at exec (`/proc/<pid>/environ` never changes), so a
workload that learns its context later — a notebook, a sweep, a launcher — says it here.
What it says is a **claim**: the server checks it against the binding of the GPU the
process runs on, which is the truth.

How the claim reaches the agent: one small JSON file per process in a spool directory,
written atomically (temporary file + rename), named by the process's **pid namespace,
pid in that namespace and start time** (`/proc/self/stat` field 22). The start time keeps
a recycled pid from inheriting another process's tags; the pid namespace and the pid as
the process itself sees it let a containerised workload name itself although it cannot
know its host pid (the agent, which sees the host pid, derives the same name from
`/proc/<pid>/status` NSpid and `/proc/<pid>/ns/pid`). A file was chosen over a local
socket because it needs no running agent: tags written while the agent restarts are read
when it is back, and a workload never blocks on, or fails because of, the agent.

The directory is `$GPUFLEET_TAG_DIR`, else `/run/gpufleet/tags` when this process may
write there (the agent creates it, mode 1777, as `/tmp` is), else
`$XDG_RUNTIME_DIR/gpufleet/tags`, else `<tempdir>/gpufleet-<uid>-tags` (mode 0700,
refused when another user owns it). The
two fallbacks serve a single-user machine where agent and workload run as one user; on a
fleet node the agent reads `/run/gpufleet/tags`, which containers get by a host mount.

Tags are merged key by key: a later call overrides the keys it names and keeps the rest;
`key=None` removes a key. A bad key or value raises ValueError at once, in the workload,
so a typo is seen where it is made; failing to write the file (no /proc on this system,
a read-only directory) is logged and returns None — tagging never stops a training run.

This module is imported by `import gpufleet`: standard library only, nothing of the server.
The agent reads the files with `gpufleet.agent.attribution.tags`, through the names and
rules defined here (`tag_file_name`, `parse_tag_file`, `is_temporary_name`): one format,
one parser, for the workload merging its own file and the agent reading it. A file is
`{"v": FORMAT_VERSION, "tags": {...}}`; one of another version is not read (a newer SDK's
file is ignored, never misread).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from gpufleet.text_limits import LABEL_TEXT_MAX, is_label_text

log = logging.getLogger(__name__)

TAG_DIR_ENV = "GPUFLEET_TAG_DIR"
SYSTEM_TAG_DIR = Path("/run/gpufleet/tags")
ALLOCATION_KEY = "allocation"  # the claimed allocation; every other key is a free tag
FORMAT_VERSION = 1
MAX_TAGS = 32
MAX_KEY_CHARS = 63
MAX_VALUE_CHARS = LABEL_TEXT_MAX
MAX_TAG_FILE_BYTES = 16 * 1024
TAG_FILE_SUFFIX = ".json"
TEMPORARY_PREFIX, TEMPORARY_SUFFIX = ".", ".tmp"  # a writer's file before its rename

_KEY = re.compile(r"^[a-z][a-z0-9_.-]*$")


class TagError(ValueError):
    """A tag key or value gpufleet cannot send; raised by `tag` in the calling workload."""


def check_tag(key: object, value: object) -> tuple[str, str]:
    """(key, value) as stored, or TagError saying what is wrong.

    Keys are lower-case label names (`model`, `dataset`, `team.name`, at most 63
    characters); values are non-empty text of at most 253 characters without control
    characters (the wire's LabelText), numbers turned into text. The agent applies the
    same rule to what it reads, dropping what fails.
    """
    if not isinstance(key, str) or not _KEY.fullmatch(key) or len(key) > MAX_KEY_CHARS:
        raise TagError(f"tag key {key!r}: use a lower-case name of letters, digits, '_', "
                       f"'.' or '-', starting with a letter, at most {MAX_KEY_CHARS} characters")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TagError(f"tag {key}: the value must be text or a number, not "
                       f"{type(value).__name__}")
    text = str(value)
    if not is_label_text(text):
        raise TagError(f"tag {key}: the value must be 1 to {MAX_VALUE_CHARS} characters "
                       "without control characters")
    return key, text


def tag_file_name(pid_namespace: int, namespace_pid: int, start_ticks: int) -> str:
    """The spool file of one process: `<pid namespace inode>-<pid in it>-<start time>.json`."""
    return f"{pid_namespace}-{namespace_pid}-{start_ticks}{TAG_FILE_SUFFIX}"


def parse_tag_file(raw: bytes) -> dict[str, str]:
    """The tags of a tag file's bytes, each key and value through `check_tag` again (what
    fails is dropped), at most MAX_TAGS; {} for a file too large, not JSON, or not of
    FORMAT_VERSION."""
    if len(raw) > MAX_TAG_FILE_BYTES:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
        return {}
    tags = data.get("tags")
    if not isinstance(tags, dict):
        return {}
    kept: dict[str, str] = {}
    for key, value in tags.items():
        if len(kept) >= MAX_TAGS:
            break
        try:
            kept.update([check_tag(key, value)])
        except TagError:
            continue
    return kept


def is_temporary_name(name: str) -> bool:
    """A writer's temporary file (`_replace`), left behind only by a crashed writer."""
    return name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX)


def parse_tag_file_name(name: str) -> tuple[int, int, int] | None:
    """(pid namespace, pid in it, start time) of a spool file name; None for any other."""
    if not name.endswith(TAG_FILE_SUFFIX):
        return None
    parts = name[: -len(TAG_FILE_SUFFIX)].split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def pid_namespace_of(ns_link: str) -> int | None:
    """The inode in a `/proc/<pid>/ns/pid` link (`pid:[4026531836]` → 4026531836)."""
    match = re.fullmatch(r"pid:\[(\d+)\]", ns_link)
    return int(match.group(1)) if match else None


def start_ticks_of(stat_text: str) -> int | None:
    """Field 22 of `/proc/<pid>/stat` (start time in clock ticks after boot). The command
    name, field 2, may hold spaces and parentheses, so fields are counted after its last ')'."""
    _, sep, rest = stat_text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


def default_tag_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where tag files go, for a workload and for an agent alike (module docstring)."""
    environ = os.environ if environ is None else environ
    if explicit := environ.get(TAG_DIR_ENV):
        return Path(explicit)
    if os.access(SYSTEM_TAG_DIR, os.W_OK | os.X_OK):
        return SYSTEM_TAG_DIR
    if runtime := environ.get("XDG_RUNTIME_DIR"):
        return Path(runtime) / "gpufleet" / "tags"
    return Path(tempfile.gettempdir()) / f"gpufleet-{os.getuid()}-tags"


def tag(allocation: str | None = None, model: str | None = None, dataset: str | None = None,
        **more: str | int | float | None) -> Path | None:
    """Claim this process's allocation and tag its work, key by key over earlier calls
    (an argument left out or None keeps its earlier value; `untag` removes). Returns the
    tag file written, or None where tagging is not possible here (logged, never raised).
    Raises TagError, a ValueError, for a bad key or value, or more than MAX_TAGS tags."""
    wanted = {ALLOCATION_KEY: allocation, "model": model, "dataset": dataset, **more}
    updates = dict(check_tag(k, v) for k, v in wanted.items() if v is not None)
    return _write(updates, removals=())


def untag(*keys: str) -> Path | None:
    """Remove tags of this process (`untag("dataset")`); returns as `tag` does."""
    for key in keys:
        check_tag(key, "x")
    return _write({}, removals=keys)


_lock = threading.Lock()


def _reset_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def _write(updates: dict[str, str], removals: tuple[str, ...] | list[str]) -> Path | None:
    try:
        name = tag_file_name(*_own_identity())
    except (OSError, ValueError) as exc:
        log.debug("gpufleet.tag: this system has no /proc to name the process by (%s)", exc)
        return None
    directory = default_tag_dir()
    path = directory / name
    with _lock:
        try:
            tags = {**_read_own(path), **updates}
            for key in removals:
                tags.pop(key, None)
            if len(tags) > MAX_TAGS:
                raise TagError(f"gpufleet.tag: at most {MAX_TAGS} tags per process")
            _ensure_dir(directory)
            _replace(path, json.dumps({"v": FORMAT_VERSION, "tags": tags}, sort_keys=True))
        except OSError as exc:
            log.warning("gpufleet.tag: could not write %s (%s); the agent will not see "
                        "these tags", path, exc)
            return None
    return path


def _own_identity() -> tuple[int, int, int]:
    """(pid namespace inode, pid, start ticks) of this process, as the agent derives them."""
    pid = os.getpid()
    namespace = pid_namespace_of(os.readlink("/proc/self/ns/pid"))
    with open("/proc/self/stat", encoding="utf-8", errors="replace") as stat:
        start = start_ticks_of(stat.read())
    if namespace is None or start is None:
        raise ValueError("unreadable /proc/self")
    return namespace, pid, start


def _read_own(path: Path) -> dict[str, str]:
    try:
        return parse_tag_file(path.read_bytes())
    except OSError:
        return {}


def _ensure_dir(directory: Path) -> None:
    """Create the directory if needed. A fallback directory (module docstring) is private:
    created 0700 and refused when it exists but belongs to another user, who could read or
    replace the files in it."""
    private = directory != SYSTEM_TAG_DIR and not os.environ.get(TAG_DIR_ENV)
    if not directory.is_dir():
        directory.mkdir(mode=0o700 if private else 0o755, parents=True, exist_ok=True)
    if private and directory.stat().st_uid != os.getuid():
        raise PermissionError(f"{directory} belongs to another user")


def _replace(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    if len(data) > MAX_TAG_FILE_BYTES:
        raise TagError(f"gpufleet.tag: the tags exceed {MAX_TAG_FILE_BYTES} bytes")
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMPORARY_PREFIX}{path.stem}.",
                               suffix=TEMPORARY_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
