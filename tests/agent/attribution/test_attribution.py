"""The Attributor on real processes this test starts, and on a fixture /proc where a real
one cannot be arranged (a recycled pid, a containerised pid, a file of another user)."""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpufleet.agent.attribution import Attribution, Attributor
from gpufleet.agent.nvml_backend import NvmlBackend
from gpufleet.tagging import tag_file_name
from tests.fake_nvml import FakeGpu, FakeNvml, FakeProcess

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="attribution reads /proc")

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYzSECRETKEY"
HOST_NS = 4026531836
POD_UID = "099b88fb-2a99-45ad-af94-d91eb81a87e9"
CID = "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"
GIB = 1 << 30

WAIT = "import sys; print('ready', flush=True); sys.stdin.read()"
# Tags what each line of stdin says (a JSON object), then answers; the test drives it.
TAGGER = """
import json, sys, gpufleet
print('ready', flush=True)
for line in sys.stdin:
    gpufleet.tag(**json.loads(line))
    print('ok', flush=True)
"""
# Tags itself, then starts a child that tags nothing, and says the child's pid.
PARENT = """
import subprocess, sys, gpufleet
gpufleet.tag(allocation='GR-9', model='llama')
child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],
                         stdin=subprocess.PIPE)
print(child.pid, flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


@contextmanager
def running(code: str, **env: str) -> Iterator[subprocess.Popen]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.Popen([sys.executable, "-c", code], env={**base, **env},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.first_line = child.stdout.readline().strip()
        yield child
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()


def strings_reachable_from(root: object) -> Iterator[str]:
    """Every str and bytes held by `root`'s instances and containers (not by classes,
    functions or modules, which reach the whole interpreter)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | type(sys) | type(gc.collect)):
            continue
        seen.add(id(obj))
        if isinstance(obj, str | bytes):
            yield obj if isinstance(obj, str) else obj.decode("latin-1")
            continue
        if callable(obj) and not hasattr(obj, "__dict__"):
            continue
        stack.extend(gc.get_referents(obj))


# -- real processes ---------------------------------------------------------------------------
def test_environment_claims_of_a_real_process_and_its_secrets_nowhere(tmp_path, caplog):
    attributor = Attributor(tag_dir=tmp_path / "tags")
    with caplog.at_level(logging.DEBUG), \
            running(WAIT, GPUFLEET_ALLOCATION="GR-7", SLURM_JOB_ID="123",
                    GPUFLEET_MODEL="llama", AWS_SECRET_ACCESS_KEY=SECRET,
                    GPUFLEET_TOKEN=SECRET + "-token", POD_NAME="trainer-0",
                    POD_NAMESPACE="ml") as child:
        found = attributor.attribute(child.pid)
        nvml = NvmlBackend("node-1", lib=FakeNvml([FakeGpu(
            "GPU-0", processes=[FakeProcess(child.pid, GIB)])]), attributor=attributor)
        snapshot = nvml.collect()
    assert found.claimed_allocation == "GR-7"
    assert found.slurm_job == "123"
    assert found.tags == {"model": "llama"}
    assert (found.pod, found.namespace) == ("trainer-0", "ml")
    assert found.name and found.name.startswith("python")
    (process,) = snapshot.unit("GPU-0").processes
    assert process.claimed_allocation == "GR-7"
    kept = list(strings_reachable_from(attributor))
    assert "GR-7" in kept  # the walk does reach what the attributor keeps
    for text in (repr(found), str(found.snapshot_fields()), snapshot.model_dump_json(),
                 caplog.text, *kept):
        assert SECRET not in text


def test_tags_of_a_real_process_are_read_and_re_read_when_it_tags_again(tmp_path):
    tags = tmp_path / "tags"
    attributor = Attributor(tag_dir=tags)
    with running(TAGGER, GPUFLEET_TAG_DIR=str(tags), GPUFLEET_ALLOCATION="GR-7") as child:
        assert attributor.attribute(child.pid).claimed_allocation == "GR-7"  # no file yet
        child.stdin.write(json.dumps({"allocation": "GR-9", "model": "llama"}) + "\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ok"
        first = attributor.attribute(child.pid)
        child.stdin.write(json.dumps({"dataset": "c4"}) + "\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ok"
        second = attributor.attribute(child.pid)
    assert (first.claimed_allocation, first.tags) == ("GR-9", {"model": "llama"})
    assert (second.claimed_allocation, second.tags) == ("GR-9",
                                                        {"model": "llama", "dataset": "c4"})


def test_a_child_process_carries_its_parents_tags(tmp_path):
    tags = tmp_path / "tags"
    with running(PARENT, GPUFLEET_TAG_DIR=str(tags)) as parent:
        child_pid = int(parent.first_line)
        found = Attributor(tag_dir=tags).attribute(child_pid)
    assert (found.claimed_allocation, found.tags) == ("GR-9", {"model": "llama"})


def test_the_tag_file_of_a_process_that_exited_is_collected_and_the_pid_claims_nothing(
        tmp_path):
    tags = tmp_path / "tags"
    with running(TAGGER, GPUFLEET_TAG_DIR=str(tags)) as child:
        child.stdin.write('{"model": "llama"}\n')
        child.stdin.flush()
        child.stdout.readline()
        attributor = Attributor(tag_dir=tags)
        assert attributor.collect_garbage() == 0  # alive: kept
    assert len(list(tags.iterdir())) == 1
    assert attributor.collect_garbage() == 1
    assert list(tags.iterdir()) == []
    assert attributor.attribute(child.pid).tags == {}  # gone (or a new process): no tags


def test_a_process_gone_between_listing_and_reading_is_no_crash(tmp_path):
    with running(WAIT) as child:
        pass
    attributor = Attributor(tag_dir=tmp_path)
    assert attributor.attribute(child.pid).claimed_allocation is None
    nvml = NvmlBackend("node-1", lib=FakeNvml([FakeGpu(
        "GPU-0", processes=[FakeProcess(child.pid, GIB)])]), attributor=attributor)
    (process,) = nvml.collect().unit("GPU-0").processes
    assert process.pid == child.pid


def test_this_process_attributes_without_error(tmp_path):
    found = Attributor(tag_dir=tmp_path).attribute(os.getpid())
    assert found.pid == os.getpid() and found.name


# -- a fixture /proc ----------------------------------------------------------------------------
class FakeProc:
    """A directory shaped like /proc for the processes a test describes."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "self" / "ns").mkdir(parents=True)
        os.symlink(f"pid:[{HOST_NS}]", root / "self" / "ns" / "pid")

    def add(self, pid: int, *, start: int, ppid: int = 1, name: str = "python",
            uid: int | None = None, cgroup: str = "0::/\n", environ: bytes = b"",
            namespace: int | None = HOST_NS, nspid: tuple[int, ...] = ()) -> None:
        uid = os.getuid() if uid is None else uid
        d = self.root / str(pid)
        (d / "ns").mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(f"{pid} ({name}) S {ppid} " + "0 " * 17 + f"{start} 0 0\n")
        nspids = "\t".join(str(p) for p in (pid, *nspid))
        (d / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                  f"NSpid:\t{nspids}\n")
        (d / "cgroup").write_text(cgroup)
        (d / "environ").write_bytes(environ)
        link = d / "ns" / "pid"
        if link.is_symlink():
            link.unlink()
        if namespace is not None:  # None: the link cannot be read (another user's process)
            os.symlink(f"pid:[{namespace}]", link)


@pytest.fixture
def proc(tmp_path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def tags(tmp_path) -> Path:
    directory = tmp_path / "tags"
    directory.mkdir()
    return directory


def write_tags(directory: Path, key: tuple[int, int, int], **tags: str) -> Path:
    path = directory / tag_file_name(*key)
    tmp = path.with_suffix(".new")
    tmp.write_text(json.dumps({"v": 1, "tags": tags}))
    os.replace(tmp, path)
    return path


def test_a_recycled_pid_does_not_inherit_the_tags_or_claims_of_the_old_process(proc, tags):
    proc.add(4242, start=1000, cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CID}\n",
             environ=b"GPUFLEET_ALLOCATION=GR-1\0")
    write_tags(tags, (HOST_NS, 4242, 1000), allocation="GR-9", model="llama")
    attributor = Attributor(proc.root, tags)
    old = attributor.attribute(4242)
    assert (old.claimed_allocation, old.tags, old.container, old.pod) == \
        ("GR-9", {"model": "llama"}, CID, POD_UID)
    proc.add(4242, start=5000)  # the old process exited; a new one got its pid
    new = attributor.attribute(4242)
    assert new == Attribution(4242, name="python")


def test_what_cannot_change_is_read_once_and_tags_again_when_their_file_changes(proc, tags):
    proc.add(77, start=10, cgroup="0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n",
             environ=b"GPUFLEET_ALLOCATION=GR-1\0SLURM_JOB_ID=999\0")
    attributor = Attributor(proc.root, tags)
    first = attributor.attribute(77)
    assert (first.slurm_job, first.claimed_allocation) == ("5", "GR-1")  # cgroup's job wins
    (proc.root / "77" / "cgroup").unlink()
    (proc.root / "77" / "environ").unlink()
    assert attributor.attribute(77) == first  # not read again
    write_tags(tags, (HOST_NS, 77, 10), allocation="GR-2", stage="train")
    tagged = attributor.attribute(77)
    assert (tagged.slurm_job, tagged.claimed_allocation, tagged.tags) == \
        ("5", "GR-2", {"stage": "train"})
    write_tags(tags, (HOST_NS, 77, 10), stage="eval")
    assert attributor.attribute(77).tags == {"stage": "eval"}
    assert attributor.attribute(77).claimed_allocation == "GR-1"  # the file no longer claims


def test_a_containerised_process_is_found_by_its_pid_namespace_and_inner_pid(proc, tags):
    proc.add(31337, start=42, namespace=4026532999, nspid=(7,),
             cgroup=f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/"
                    f"cri-containerd-{CID}.scope\n",
             environ=b"POD_NAME=trainer-0\0POD_NAMESPACE=ml\0")
    write_tags(tags, (4026532999, 7, 42), allocation="GR-3")
    found = Attributor(proc.root, tags).attribute(31337)
    assert (found.claimed_allocation, found.pod, found.pod_uid, found.namespace) == \
        ("GR-3", "trainer-0", POD_UID, "ml")
    assert found.snapshot_fields() == {
        "name": "python", "container": CID, "pod": "trainer-0", "namespace": "ml",
        "slurm_job": None, "claimed_allocation": "GR-3", "tags": {}}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file away")
def test_a_tag_file_of_another_user_is_not_believed(proc, tags):
    proc.add(50, start=1)
    os.chown(write_tags(tags, (HOST_NS, 50, 1), allocation="GR-666"), 12345, 12345)
    assert Attributor(proc.root, tags).attribute(50).claimed_allocation is None


def test_links_fifos_and_junk_in_the_spool_are_not_believed(proc, tags, tmp_path):
    proc.add(51, start=1)
    proc.add(52, start=1)
    proc.add(53, start=1)
    elsewhere = write_tags(tmp_path, (0, 0, 0), allocation="GR-666")
    os.symlink(elsewhere, tags / tag_file_name(HOST_NS, 51, 1))
    os.mkfifo(tags / tag_file_name(HOST_NS, 52, 1))  # must not block the agent
    (tags / tag_file_name(HOST_NS, 53, 1)).write_text(
        '{"v": 1, "tags": {"Bad Key": "x", "ok": "\\n", "model": "llama"}}')
    attributor = Attributor(proc.root, tags)
    assert attributor.attribute(51).claimed_allocation is None
    assert attributor.attribute(52).claimed_allocation is None
    assert attributor.attribute(53).tags == {"model": "llama"}


def test_a_process_vanishing_while_it_is_read_claims_nothing(proc, tags):
    proc.add(60, start=1, environ=b"GPUFLEET_ALLOCATION=GR-1\0")
    (proc.root / "60" / "status").unlink()  # gone after its stat was read
    assert Attributor(proc.root, tags).attribute(60) == Attribution(60)
    assert Attributor(proc.root, tags).attribute(61) == Attribution(61)  # never there


def test_garbage_collection_keeps_live_files_and_files_it_does_not_know(proc, tags):
    proc.add(70, start=3)
    live = write_tags(tags, (HOST_NS, 70, 3), model="a")
    dead = write_tags(tags, (HOST_NS, 70, 2), model="b")  # an earlier process of pid 70
    stale_tmp = tags / ".1-2-3.abc.tmp"
    stale_tmp.write_text("")
    os.utime(stale_tmp, (0, 0))
    fresh_tmp = tags / ".1-2-4.abc.tmp"
    fresh_tmp.write_text("")
    other = tags / "README"
    other.write_text("not ours")
    clock = [100.0]
    attributor = Attributor(proc.root, tags, gc_every_s=300, monotonic=lambda: clock[0])
    assert attributor.collect_garbage_if_due() == 2
    assert sorted(p.name for p in tags.iterdir()) == sorted(
        [live.name, fresh_tmp.name, other.name])
    assert not dead.exists() and not stale_tmp.exists()
    write_tags(tags, (HOST_NS, 71, 1), model="c")
    clock[0] += 299
    assert attributor.collect_garbage_if_due() == 0  # not due yet
    clock[0] += 1
    assert attributor.collect_garbage_if_due() == 1


def test_garbage_collection_keeps_files_of_a_process_whose_namespace_it_cannot_read(
        proc, tags):
    proc.add(80, start=555, namespace=None, nspid=(3,))  # in a container, link unreadable
    kept = write_tags(tags, (4026532111, 3, 555), model="a")
    assert Attributor(proc.root, tags).collect_garbage() == 0
    assert kept.exists()


def test_the_nvml_backend_fills_process_claims_from_its_attributor(proc, tags):
    proc.add(101, start=9, name="torchrun", environ=b"GPUFLEET_ALLOCATION=GR-7\0",
             cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CID}\n")
    write_tags(tags, (HOST_NS, 101, 9), model="llama")
    gpu = FakeGpu("GPU-0", processes=[FakeProcess(101, GIB), FakeProcess(102, GIB)])
    nvml = NvmlBackend("node-1", lib=FakeNvml([gpu]), attributor=Attributor(proc.root, tags))
    procs = {p.pid: p for p in nvml.collect().unit("GPU-0").processes}
    assert procs[101].model_dump(exclude={"values"}) == {
        "pid": 101, "name": "torchrun", "container": CID, "pod": POD_UID, "namespace": None,
        "slurm_job": None, "claimed_allocation": "GR-7", "tags": {"model": "llama"}}
    assert procs[102].model_dump(exclude={"values"}) == {
        "pid": 102, "name": None, "container": None, "pod": None, "namespace": None,
        "slurm_job": None, "claimed_allocation": None, "tags": {}}  # not in /proc: no claims
