"""What a process's cgroup says about its workload: container, Kubernetes pod, Slurm job.

`/proc/<pid>/cgroup` has one `hierarchy-id:controllers:path` line per hierarchy (cgroup v1)
or the single unified line `0::path` (v2; hybrid hosts have both). The container runtime,
the kubelet and slurmd put their processes in groups whose names carry the ids, and the
kernel — not the workload — says which group a process is in, so these are the node's
strongest claims. They are still claims: the server checks them against the binding.

Shapes recognised (tests/agent/attribution/test_cgroup.py has a real line of each):

- container id (64 hex digits), the innermost one when containers nest:
  a bare segment (cgroupfs: `/docker/<id>`, `/kubepods/burstable/pod<uid>/<id>`,
  containerd's `/default/<id>`) or a systemd scope `docker-<id>.scope`,
  `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`,
  `containerd-<id>.scope`, `nerdctl-<id>.scope`. `crio-conmon-…` and `libpod-conmon-…`
  are the runtime's monitor, not the container: no container id from them.
- Kubernetes pod uid, below a `kubepods` group: `pod<uid>` (cgroupfs driver) or
  `kubepods-<qos>-pod<uid_with_underscores>.slice` (systemd driver; the underscores are
  turned back into dashes). Static pods' uids are 32 hex digits without dashes.
- Slurm job id: `job_<id>` below the cgroup v1 plugin's `/slurm/` (or `/slurm_<node>/`
  with several slurmd per host) or the v2 plugin's `slurmstepd.scope`
  (`<node>_slurmstepd.scope`). `slurmstepd.scope/system` is slurmstepd itself: no job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEX64 = r"[0-9a-f]{64}"
_CONTAINER_SEGMENT = re.compile(
    rf"^(?:(?:docker|cri-containerd|crio|libpod|containerd|nerdctl)-)?({_HEX64})(?:\.scope)?$")
_POD_SEGMENT = re.compile(
    r"(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32})(?:\.slice)?$")
_SLURM_ROOT = re.compile(r"^(?:slurm(?:_[^/]+)?|(?:[^/]+_)?slurmstepd\.scope)$")
_SLURM_JOB = re.compile(r"^job_(\d+)$")


@dataclass(frozen=True)
class CgroupClaims:
    container: str | None = None  # the runtime's container id, 64 hex digits
    pod_uid: str | None = None  # the Kubernetes pod's metadata.uid, with dashes
    slurm_job: str | None = None  # the Slurm job id, digits


def parse_cgroup(text: str) -> CgroupClaims:
    """The claims in the text of `/proc/<pid>/cgroup`; empty claims for a host process or
    text in no shape above. The unified (v2) line is read first; each claim comes from the
    first line that has it."""
    paths = [path for line in text.splitlines()
             if (path := _path_of(line)) is not None]
    paths.sort(key=lambda item: not item[0])  # the unified line first
    container = pod = job = None
    for _, path in paths:
        found = claims_of_path(path)
        container = container or found.container
        pod = pod or found.pod_uid
        job = job or found.slurm_job
    return CgroupClaims(container, pod, job)


def claims_of_path(path: str) -> CgroupClaims:
    """The claims in one cgroup path (`/kubepods/burstable/pod<uid>/<container id>`)."""
    segments = [s for s in path.split("/") if s]
    return CgroupClaims(_container(segments), _pod(segments), _slurm_job(segments))


def _path_of(line: str) -> tuple[bool, str] | None:
    """(is the unified hierarchy, path) of one line; None for a malformed line."""
    parts = line.strip().split(":", 2)
    if len(parts) != 3 or not parts[2].startswith("/"):
        return None
    return (parts[0] == "0" and parts[1] == ""), parts[2]


def _container(segments: list[str]) -> str | None:
    for segment in reversed(segments):
        if match := _CONTAINER_SEGMENT.match(segment):
            return match.group(1)
    return None


def _pod(segments: list[str]) -> str | None:
    for i, segment in enumerate(segments):
        match = _POD_SEGMENT.search(segment)
        if match and any("kubepods" in s for s in segments[: i + 1]):
            return _pod_uid(match.group(1))
    return None


def _pod_uid(raw: str) -> str:
    return raw.replace("_", "-")


def _slurm_job(segments: list[str]) -> str | None:
    for i, segment in enumerate(segments):
        if _SLURM_ROOT.match(segment):
            for below in segments[i + 1:]:
                if match := _SLURM_JOB.match(below):
                    return match.group(1)
            return None
    return None
