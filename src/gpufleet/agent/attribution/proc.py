"""Who a pid is, from `/proc`: its start time, parent, name, owner and pid namespace.

A pid alone does not name a process: pids are recycled. The pair (pid, start time) does —
the kernel's start time in clock ticks after boot (`/proc/<pid>/stat` field 22) — so the
agent keys everything it remembers about a process by the pair, and re-reads the start
time on every look to notice a new process behind an old pid.

Every reader returns None for a process that cannot be read — gone, a permission
refused, no /proc on this system — which the caller treats as "no claims", never as an
error. `proc` is the procfs root (`/proc`, `/host/proc` for an agent in a container,
a fixture directory in tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpufleet.tagging import pid_namespace_of, start_ticks_of

MAX_PROC_TEXT = 64 * 1024  # stat, status and cgroup are a few hundred bytes to a few KiB


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as `/proc/<pid>/stat` names it."""

    pid: int
    start_ticks: int
    ppid: int
    name: str  # the command name (comm, at most 15 characters), not the command line


@dataclass(frozen=True)
class ProcessOwner:
    """Whose a process is, from `/proc/<pid>/status` and `/proc/<pid>/ns/pid`."""

    uids: frozenset[int]  # real and effective uid
    pid_namespace: int | None  # the inode of its pid namespace
    namespace_pid: int | None  # its pid inside that namespace (NSpid's last entry)


def read_text(path: Path) -> str | None:
    """A small /proc file's text (bounded), or None when it cannot be read."""
    try:
        with open(path, "rb") as file:
            return file.read(MAX_PROC_TEXT).decode("utf-8", errors="replace")
    except OSError:
        return None


def parse_stat(pid: int, text: str) -> ProcessIdentity | None:
    """`/proc/<pid>/stat` → identity. The name (field 2) is in parentheses and may itself
    hold spaces and parentheses, so the fields after it are counted from its last ')'."""
    start = start_ticks_of(text)
    opened, closed = text.find("("), text.rfind(")")
    fields = text[closed + 1:].split()
    if start is None or opened < 0 or len(fields) < 2 or not fields[1].isdigit():
        return None
    return ProcessIdentity(pid, start, int(fields[1]), text[opened + 1: closed])


def parse_status(text: str) -> tuple[frozenset[int], int | None]:
    """(real and effective uid, pid in its innermost pid namespace) from `status`."""
    uids: frozenset[int] = frozenset()
    namespace_pid = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields = value.split()
        if key == "Uid" and len(fields) >= 2 and all(f.isdigit() for f in fields[:2]):
            uids = frozenset(int(f) for f in fields[:2])
        elif key == "NSpid" and fields and fields[-1].isdigit():
            namespace_pid = int(fields[-1])
    return uids, namespace_pid


def read_identity(proc: Path, pid: int) -> ProcessIdentity | None:
    text = read_text(proc / str(pid) / "stat")
    return None if text is None else parse_stat(pid, text)


def read_owner(proc: Path, pid: int) -> ProcessOwner | None:
    """The owner of a process; its pid namespace is None when the link cannot be read
    (another user's process, for an agent that is not root) and the process is not in
    the namespace of `proc` itself."""
    status = read_text(proc / str(pid) / "status")
    if status is None:
        return None
    uids, namespace_pid = parse_status(status)
    nested = namespace_pid is not None and namespace_pid != pid
    namespace = _pid_namespace(proc / str(pid))
    if namespace is None and not nested:
        namespace = _pid_namespace(proc / "self")  # NSpid has one entry: the proc mount's
    return ProcessOwner(uids, namespace, pid if namespace_pid is None else namespace_pid)


def _pid_namespace(process_dir: Path) -> int | None:
    try:
        return pid_namespace_of(os.readlink(process_dir / "ns" / "pid"))
    except OSError:
        return None


def live_pids(proc: Path) -> list[int]:
    """Every pid under `proc`; empty where there is no procfs."""
    try:
        return [int(entry.name) for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return []
