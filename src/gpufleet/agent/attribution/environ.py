"""What a process's environment says about its workload — read through an allow-list.

A process's environment holds secrets (cloud keys, tokens, passwords, `GPUFLEET_TOKEN`
itself), so the agent keeps **only the keys below** (docs/design.md, "Security"). The raw bytes of
`/proc/<pid>/environ` are split and filtered here, in one function, and dropped; no other
key or value is kept, logged, put in an exception or sent. Note that a `GPUFLEET_*` prefix
is *not* allowed as such: gpufleet's own settings (`GPUFLEET_TOKEN`,
`GPUFLEET_DATABASE_URL`, `GPUFLEET_JOIN_TOKEN`) use that prefix and are secrets.

- `GPUFLEET_ALLOCATION` → the claimed allocation (docs/design.md, "Concepts"'s claim).
- `GPUFLEET_PROJECT`, `GPUFLEET_MODEL`, `GPUFLEET_DATASET`, `GPUFLEET_EXPERIMENT` → tags
  `project`, `model`, `dataset`, `experiment`: the SDK's tags, for work that cannot call it.
- `GPUFLEET_TAGS` → more tags, `key=value,key=value` (not `allocation`): free tags under
  one explicit name.
- `SLURM_JOB_ID` → the Slurm job: slurmd sets it in every job; used where the cgroup
  names no job (the cgroup is slurmd's word, the variable anyone's).
- `POD_NAME` / `MY_POD_NAME` → the pod name, `POD_NAMESPACE` / `MY_POD_NAMESPACE` → the
  namespace: the names Kubernetes downward-API manifests commonly use (`MY_POD_*` is the
  Kubernetes documentation's own example).

Left out on purpose: `SLURM_JOB_NAME` (free text the user chose; Slurm's accounting
gives it by job id, and it is no claim the server can check), `KUBERNETES_POD_NAME` and
`HOSTNAME` (no convention: `HOSTNAME` is the pod name only when the pod sets no hostname,
and on a host it names the host), `CUDA_VISIBLE_DEVICES` (the binding, not the process,
says which unit is whose).

Values are kept only when they are label text (1–253 characters, valid UTF-8, no control
characters); a key that appears twice keeps its first value, as getenv(3) does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.tagging import ALLOCATION_KEY as ALLOCATION_TAG
from gpufleet.tagging import TagError, check_tag
from gpufleet.text_limits import is_label_text

MAX_ENVIRON_BYTES = 256 * 1024  # far above a real environment; ARG_MAX bounds it anyway

ALLOCATION = "GPUFLEET_ALLOCATION"
TAG_KEYS = {"GPUFLEET_PROJECT": "project", "GPUFLEET_MODEL": "model",
            "GPUFLEET_DATASET": "dataset", "GPUFLEET_EXPERIMENT": "experiment"}
FREE_TAGS = "GPUFLEET_TAGS"
SLURM_JOB = "SLURM_JOB_ID"
POD_NAMES = ("POD_NAME", "MY_POD_NAME")
POD_NAMESPACES = ("POD_NAMESPACE", "MY_POD_NAMESPACE")
ALLOWED = frozenset({ALLOCATION, *TAG_KEYS, FREE_TAGS, SLURM_JOB, *POD_NAMES,
                     *POD_NAMESPACES})
_ALLOWED_BYTES = frozenset(k.encode("ascii") for k in ALLOWED)


@dataclass(frozen=True)
class EnvironClaims:
    claimed_allocation: str | None = None
    slurm_job: str | None = None
    pod_name: str | None = None
    namespace: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


def allowed_entries(raw: bytes) -> dict[str, str]:
    """The allow-listed `KEY=value` entries of NUL-separated environ bytes. An entry without
    `=`, a value that is not UTF-8 label text, and every key off the list are skipped
    without being decoded. A final entry cut short by the read bound is dropped."""
    entries = raw.split(b"\0")
    if not raw.endswith(b"\0"):
        entries.pop()  # unterminated: cut by the bound (or an empty read)
    kept: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition(b"=")
        if not sep or key not in _ALLOWED_BYTES:
            continue
        name = key.decode("ascii")
        if name in kept:
            continue
        if (text := _label_text(value)) is not None:
            kept[name] = text
    return kept


def claims_of(entries: dict[str, str]) -> EnvironClaims:
    """The claims in allow-listed entries (from `allowed_entries`)."""
    tags = _free_tags(entries.get(FREE_TAGS, ""))
    tags.pop(ALLOCATION_TAG, None)  # the allocation is claimed by GPUFLEET_ALLOCATION only
    tags.update({tag: entries[key] for key, tag in TAG_KEYS.items() if key in entries})
    return EnvironClaims(
        claimed_allocation=entries.get(ALLOCATION),
        slurm_job=entries.get(SLURM_JOB),
        pod_name=next((entries[k] for k in POD_NAMES if k in entries), None),
        namespace=next((entries[k] for k in POD_NAMESPACES if k in entries), None),
        tags=tags)


def read_environ_claims(path: Path) -> EnvironClaims:
    """The claims in a `/proc/<pid>/environ`; none when it cannot be read (permission
    denied, process gone, no /proc): that is no claim, not an error."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return EnvironClaims()
    try:
        raw = _read_bounded(fd)
    except OSError:
        return EnvironClaims()
    finally:
        os.close(fd)
    return claims_of(allowed_entries(raw))


def _read_bounded(fd: int) -> bytes:
    chunks: list[bytes] = []
    left = MAX_ENVIRON_BYTES
    while left > 0 and (chunk := os.read(fd, min(left, 64 * 1024))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _label_text(value: bytes) -> str | None:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None  # never logged: the exception carries the bytes
    return text if is_label_text(text) else None  # what check_tag keeps of a value


def _free_tags(text: str) -> dict[str, str]:
    """`key=value,key=value` → tags; a malformed pair is skipped."""
    tags: dict[str, str] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if not sep:
            continue
        try:
            key, value = check_tag(key.strip(), value.strip())
        except TagError:
            continue
        tags.setdefault(key, value)
    return tags
