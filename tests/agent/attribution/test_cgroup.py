"""The cgroup parser against `/proc/<pid>/cgroup` lines in the shapes real nodes write.

The lines follow examples published with cgroup-reading tools and runtimes' own tests
(kubelet e2e, NeuVector's and container-info's fixtures, Slurm job monitors, Slurm's
cgroup/v2 documentation); the ids in them are those examples' ids.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.agent.attribution.cgroup import CgroupClaims, claims_of_path, parse_cgroup

DOCKER_ID = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
K8S_CID = "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"
CRIO_CID = "0bc5eac79e3ae7a0c2651f14722aa10fa333eb2325c2ca97da33aa284cda81b0"
POD_UID = "74c13223-5a00-11e9-b385-42010a80018d"
SYSTEMD_POD_UID = "099b88fb-2a99-45ad-af94-d91eb81a87e9"
STATIC_POD_UID = "6d8ed5d1d34f4b8c52e0ff1c6bd8f7d3"

CASES = {
    # -- plain containers -------------------------------------------------------------------
    "docker cgroupfs v1": (
        f"12:memory:/docker/{DOCKER_ID}\n11:cpuset:/docker/{DOCKER_ID}\n",
        CgroupClaims(container=DOCKER_ID)),
    "docker cgroupfs, id at the root (Debian)": (
        f"4:memory:/{DOCKER_ID}\n3:cpuacct:/{DOCKER_ID}\n",
        CgroupClaims(container=DOCKER_ID)),
    "docker systemd v1": (
        f"10:devices:/system.slice/docker-{DOCKER_ID}.scope\n"
        f"1:name=systemd:/system.slice/docker-{DOCKER_ID}.scope\n",
        CgroupClaims(container=DOCKER_ID)),
    "docker systemd v2": (
        f"0::/system.slice/docker-{DOCKER_ID}.scope\n", CgroupClaims(container=DOCKER_ID)),
    "docker in docker: the innermost container": (
        f"0::/docker/{K8S_CID}/docker/{DOCKER_ID}\n", CgroupClaims(container=DOCKER_ID)),
    "podman v2": (
        f"0::/machine.slice/libpod-{DOCKER_ID}.scope/container\n",
        CgroupClaims(container=DOCKER_ID)),
    "podman rootless v2": (
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{DOCKER_ID}.scope\n",
        CgroupClaims(container=DOCKER_ID)),
    "podman's conmon is not the container": (
        f"0::/machine.slice/libpod-conmon-{DOCKER_ID}.scope\n", CgroupClaims()),
    "containerd without Kubernetes (namespace default)": (
        f"0::/default/{DOCKER_ID}\n", CgroupClaims(container=DOCKER_ID)),
    "nerdctl systemd": (
        f"0::/system.slice/nerdctl-{DOCKER_ID}.scope\n", CgroupClaims(container=DOCKER_ID)),
    # -- Kubernetes ---------------------------------------------------------------------------
    "kubernetes cgroupfs v1 besteffort": (
        f"11:devices:/kubepods/besteffort/pod{POD_UID}/{K8S_CID}\n"
        f"9:memory:/kubepods/besteffort/pod{POD_UID}/{K8S_CID}\n",
        CgroupClaims(container=K8S_CID, pod_uid=POD_UID)),
    "kubernetes cgroupfs guaranteed (no QoS level), k3s": (
        f"4:memory:/kubepods/pod{POD_UID}/{K8S_CID}\n",
        CgroupClaims(container=K8S_CID, pod_uid=POD_UID)),
    "kubernetes cgroupfs v2 burstable": (
        f"0::/kubepods/burstable/pod{POD_UID}/{K8S_CID}\n",
        CgroupClaims(container=K8S_CID, pod_uid=POD_UID)),
    "kubernetes systemd v2 containerd": (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{SYSTEMD_POD_UID.replace('-', '_')}.slice/cri-containerd-{K8S_CID}.scope\n",
        CgroupClaims(container=K8S_CID, pod_uid=SYSTEMD_POD_UID)),
    "kubernetes systemd v1 cri-o": (
        "4:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{SYSTEMD_POD_UID.replace('-', '_')}.slice/crio-{CRIO_CID}.scope\n",
        CgroupClaims(container=CRIO_CID, pod_uid=SYSTEMD_POD_UID)),
    "kubernetes systemd cri-o conmon: the pod, no container": (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        "0b7632a2_a56e_4278_987a_22de18008dbe.slice/crio-conmon-" + CRIO_CID + ".scope\n",
        CgroupClaims(pod_uid="0b7632a2-a56e-4278-987a-22de18008dbe")),
    "kubernetes systemd guaranteed with dockershim": (
        f"0::/kubepods.slice/kubepods-pod{SYSTEMD_POD_UID.replace('-', '_')}.slice/"
        f"docker-{DOCKER_ID}.scope\n",
        CgroupClaims(container=DOCKER_ID, pod_uid=SYSTEMD_POD_UID)),
    "kubernetes static pod (uid is a 32-digit hash)": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_POD_UID}"
        f".slice/cri-containerd-{K8S_CID}.scope\n",
        CgroupClaims(container=K8S_CID, pod_uid=STATIC_POD_UID)),
    "kind node: kubelet's own slice": (
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SYSTEMD_POD_UID.replace('-', '_')}.slice/"
        f"cri-containerd-{K8S_CID}.scope\n",
        CgroupClaims(container=K8S_CID, pod_uid=SYSTEMD_POD_UID)),
    "hybrid host: v1 lines and the unified line": (
        f"1:name=systemd:/kubepods/burstable/pod{POD_UID}/{K8S_CID}\n"
        f"0::/kubepods/burstable/pod{POD_UID}/{K8S_CID}\n",
        CgroupClaims(container=K8S_CID, pod_uid=POD_UID)),
    "a pod-looking segment outside kubepods is no pod": (
        f"0::/system.slice/pod{POD_UID}.slice\n", CgroupClaims()),
    # -- Slurm -------------------------------------------------------------------------------
    "slurm cgroup/v2": (
        "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n",
        CgroupClaims(slurm_job="1392969")),
    "slurm cgroup/v2 batch step, several slurmd per host": (
        "0::/system.slice/node01_slurmstepd.scope/job_77/step_batch/user/task_special\n",
        CgroupClaims(slurm_job="77")),
    "slurm cgroup/v2 extern step (pam_slurm_adopt)": (
        "0::/system.slice/slurmstepd.scope/job_42/step_extern/user\n",
        CgroupClaims(slurm_job="42")),
    "slurm cgroup/v2: slurmstepd itself is no job": (
        "0::/system.slice/slurmstepd.scope/system\n", CgroupClaims()),
    "slurm cgroup/v1 interactive step": (
        "10:devices:/slurm/uid_2101171/job_280678/step_interactive/task_0\n"
        "4:memory:/slurm/uid_2101171/job_280678/step_interactive/task_0\n",
        CgroupClaims(slurm_job="280678")),
    "slurm cgroup/v1 with several slurmd per host": (
        "4:memory:/slurm_node07/uid_1000/job_5/step_0/task_1\n", CgroupClaims(slurm_job="5")),
    "a job_ segment outside slurm is no job": (
        "0::/user.slice/job_12/step_0\n", CgroupClaims()),
    "a container in a slurm job (pyxis/enroot-like)": (
        f"0::/system.slice/slurmstepd.scope/job_901/step_0/user/task_0/docker-{DOCKER_ID}.scope\n",
        CgroupClaims(container=DOCKER_ID, slurm_job="901")),
    # -- host processes and junk ---------------------------------------------------------------
    "host v2 session": ("0::/user.slice/user-1000.slice/session-3.scope\n", CgroupClaims()),
    "host v2 init": ("0::/init.scope\n", CgroupClaims()),
    "root, as inside a cgroup namespace": ("0::/\n", CgroupClaims()),
    "host v1, every hierarchy at the root": (
        "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/a10db8d1d546bb12f939171235b6ad40\n"
        "0::/\n", CgroupClaims()),
    "a short hex segment is no container id": (
        "0::/system.slice/docker-abc123.scope\n", CgroupClaims()),
    "empty": ("", CgroupClaims()),
    "garbage": ("not a cgroup file\n\0\0\n::\n12:memory\n", CgroupClaims()),
}


@pytest.mark.parametrize("text, expected", CASES.values(), ids=CASES.keys())
def test_cgroup_claims(text, expected):
    assert parse_cgroup(text) == expected


def test_one_path_alone():
    path = f"/kubepods/besteffort/pod{POD_UID}/{K8S_CID}"
    assert claims_of_path(path) == CgroupClaims(container=K8S_CID, pod_uid=POD_UID)


def test_this_process_cgroup_parses():
    text = Path("/proc/self/cgroup").read_text() if Path("/proc/self/cgroup").exists() else ""
    assert isinstance(parse_cgroup(text), CgroupClaims)
