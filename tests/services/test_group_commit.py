"""Group commit: batches that queue behind a write are written together, each caller gets its
own answer, and a failed write fails exactly the batches it carried."""

from __future__ import annotations

import threading

import pytest

from gpufleet.services.group_commit import GroupCommit
from gpufleet.tsdb import SampleColumns, series


def columns(samples: int) -> SampleColumns:
    return SampleColumns([series("gpu.sm_active", "GPU-a")], [0] * samples,
                         list(range(samples)), [1.0] * samples)


class Recorder:
    """A store write that records its groups; the first one waits until released, so the
    other callers queue behind it."""

    def __init__(self, fail_group: int | None = None):
        self.groups: list[list[str]] = []
        self.first_started = threading.Event()
        self.release = threading.Event()
        self.fail_group = fail_group

    def __call__(self, batches):
        self.groups.append([key for key, _ in batches])
        if len(self.groups) == 1:
            self.first_started.set()
            assert self.release.wait(10)
        if len(self.groups) - 1 == self.fail_group:
            raise OSError("disk full")
        return [None if key.startswith("dup") else len(c) for key, c in batches]


def run_behind_a_slow_first_write(commit: GroupCommit, recorder: Recorder, keys: list[str]):
    answers: dict[str, object] = {}

    def submit(key: str) -> None:
        try:
            answers[key] = commit.submit(key, columns(2))
        except OSError as exc:
            answers[key] = exc

    first = threading.Thread(target=submit, args=("first",))
    first.start()
    assert recorder.first_started.wait(10)
    others = [threading.Thread(target=submit, args=(k,)) for k in keys]
    for thread in others:
        thread.start()
    while len(commit._queue) < len(keys):  # every other caller has queued
        threading.Event().wait(0.001)
    recorder.release.set()
    for thread in (first, *others):
        thread.join(10)
    return answers


def test_batches_queued_behind_a_write_go_in_one_group_with_their_own_answers():
    recorder = Recorder()
    commit = GroupCommit(recorder)
    keys = ["a", "b", "dup-c", "d"]
    answers = run_behind_a_slow_first_write(commit, recorder, keys)
    assert recorder.groups[0] == ["first"]
    assert sorted(recorder.groups[1]) == sorted(keys)  # one group, not four
    assert answers == {"first": 2, "a": 2, "b": 2, "dup-c": None, "d": 2}


def test_a_failed_write_fails_the_batches_it_carried_and_no_others():
    recorder = Recorder(fail_group=1)
    commit = GroupCommit(recorder)
    answers = run_behind_a_slow_first_write(commit, recorder, ["a", "b"])
    assert answers["first"] == 2
    assert all(isinstance(answers[k], OSError) for k in ("a", "b"))
    assert commit.submit("later", columns(1)) == 1  # the committer is not left stuck


def test_a_group_stops_at_the_sample_budget():
    recorder = Recorder()
    commit = GroupCommit(recorder, max_samples=4)  # two batches of two samples per group
    answers = run_behind_a_slow_first_write(commit, recorder, ["a", "b", "c", "d", "e"])
    assert [len(group) for group in recorder.groups[1:]] == [2, 2, 1]
    assert set(answers) == {"first", "a", "b", "c", "d", "e"}


@pytest.mark.parametrize("samples", [0, 5])
def test_alone_a_batch_is_written_at_once(samples):
    recorder = Recorder()
    recorder.release.set()
    assert GroupCommit(recorder).submit("only", columns(samples)) == samples


def test_batches_submitted_together_share_one_write_and_each_gets_its_answer():
    written: list[list[str]] = []

    def write(batches):
        written.append([key for key, _ in batches])
        return [None if key.startswith("dup") else len(c) for key, c in batches]

    commit = GroupCommit(write)
    assert commit.submit_all([("a", columns(2)), ("dup", columns(1)), ("b", columns(3))]) \
        == [2, None, 3]
    assert written == [["a", "dup", "b"]]
    assert commit.submit_all([]) == []


def test_batches_submitted_together_may_span_groups_and_fail_as_their_group_fails():
    recorder = Recorder(fail_group=1)
    commit = GroupCommit(recorder, max_samples=4)
    release = threading.Timer(0.05, recorder.release.set)
    release.start()
    with pytest.raises(OSError, match="disk full"):
        commit.submit_all([("a", columns(2)), ("b", columns(2)), ("c", columns(2))])
    release.join()
    assert recorder.groups == [["a", "b"], ["c"]]
