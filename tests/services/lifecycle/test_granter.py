"""The granter batches approvals: those queued while a grant runs are approved and granted
together in the next transaction (services/lifecycle/granter.py). A refused approval fails only its
own caller; a grant the database keeps refusing still leaves the approval written."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from sqlalchemy import event

from gpufleet.domain.errors import Conflict, NotFound
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.services.lifecycle import bindings
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, register


def pending(gf, count: int = 1) -> str:
    return gf.lifecycle.create_request(SYSTEM, RequestCreate(project="vision",
                                                             count=count)).code


def actions(gf, code: str) -> list[str]:
    return [e.action for e in gf.lifecycle.history(SYSTEM, code, None, 1000).items]


@contextmanager
def a_batch_running(granter):
    """As if another caller were leading a batch: new callers queue until it ends."""
    with granter._turn:
        granter._leading = True
    try:
        yield
    finally:
        with granter._turn:
            granter._leading = False
            granter._turn.notify_all()


def wait_for_queue(granter, length: int) -> None:
    deadline = time.monotonic() + 10
    while len(granter._queue) < length:
        assert time.monotonic() < deadline, "callers never queued"
        time.sleep(0.01)


def test_approvals_queued_together_commit_once_and_a_refused_one_fails_only_its_caller(
        two_nodes, gf, store):
    gf.lifecycle.warm()
    first, second = pending(gf), pending(gf, count=2)
    commits = []
    for engine in {store._write_engine, store._dedicated_engine}:  # one on SQLite
        event.listen(engine, "commit", lambda conn: commits.append(1))
    granter = gf.lifecycle.granter
    with ThreadPoolExecutor(max_workers=3) as pool:
        with a_batch_running(granter):  # the callers queue behind it
            calls = [pool.submit(gf.lifecycle.approve, SYSTEM, code, None)
                     for code in (first, second, first)]
            wait_for_queue(granter, 3)
        outcomes = []
        for call in calls:
            try:
                outcomes.append(call.result().state)
            except Conflict as exc:  # `first` approved twice: one of them is refused
                outcomes.append(exc.code)
    assert sorted(outcomes) == ["active", "active", "invalid_transition"]
    assert len(commits) == 1
    for code in (first, second):
        assert actions(gf, code) == ["request.created", "request.approved",
                                     "request.activated"]


def test_an_approval_whose_grant_the_database_keeps_refusing_is_still_written(
        two_nodes, gf, monkeypatch):
    code = pending(gf)

    def refuse(*args, **kwargs):
        raise bindings.UnitTaken("taken by another server meanwhile")

    monkeypatch.setattr(bindings, "open_bindings", refuse)
    view = gf.lifecycle.approve(SYSTEM, code, "go ahead")
    assert (view.state, view.wait_code) == ("approved", "queued")
    assert actions(gf, code) == ["request.created", "request.approved"]
    monkeypatch.undo()
    gf.lifecycle.tick()  # the lifecycle loop grants what waits
    assert gf.lifecycle.show_request(SYSTEM, code).state == "active"


def test_approving_a_request_that_does_not_exist_writes_nothing(two_nodes, gf):
    code = pending(gf)
    with pytest.raises(NotFound):
        gf.lifecycle.approve(SYSTEM, "GR-999999", None)
    assert gf.lifecycle.show_request(SYSTEM, code).state == "pending"


def test_a_create_refused_by_a_stale_fleet_shape_asks_the_database_again(
        api, store, settings, clock):
    """The models and node sizes a create checks against are kept in memory; GPUs
    registered since through another server must not make a request impossible."""
    create_environment(api)
    register(api, 1, gpus=4)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    other = Gpufleet(store, settings, clock)  # a second server process, its own memo

    def create(count: int):
        return other.lifecycle.create_request(SYSTEM, RequestCreate(
            project="vision", count=count, same_node=True))

    assert create(4).state == "pending"  # the memo is read: nodes of 4 GPUs
    register(api, 2, gpus=8)
    assert create(8).state == "pending"


# --- oldest first, whoever reaches the granter first ----------------------------------------
@pytest.fixture
def full_fleet_and_a_queue(two_nodes, gf, monkeypatch):
    """The fleet's 8 GPUs held by one request; an older approved request of 8 waits; a newer
    request of 8 is pending. The holder is then released, but its own try at the queue is
    held back — as when an approval reaches the granter first."""
    holder = pending(gf, count=8)
    assert gf.lifecycle.approve(SYSTEM, holder, None).state == "active"
    older = pending(gf, count=8)
    assert gf.lifecycle.approve(SYSTEM, older, None).wait_code == "waiting_for_capacity"
    newer = pending(gf, count=8)
    with monkeypatch.context() as patched:
        patched.setattr(gf.lifecycle, "grant_waiting", lambda: 0)
        assert gf.lifecycle.release(SYSTEM, holder, None).state == "released"
    return older, newer


def test_an_approval_racing_a_release_does_not_jump_the_queue(gf, full_fleet_and_a_queue):
    older, newer = full_fleet_and_a_queue
    assert gf.lifecycle.approve(SYSTEM, newer, None).state == "approved"
    assert gf.lifecycle.show_request(SYSTEM, older).state == "active"


def test_in_one_batch_the_older_approved_request_is_granted_first(gf,
                                                                  full_fleet_and_a_queue):
    older, newer = full_fleet_and_a_queue
    granter = gf.lifecycle.granter
    with ThreadPoolExecutor(max_workers=2) as pool:
        with a_batch_running(granter):  # the new approval queues ahead of the loop's turn
            approval = pool.submit(gf.lifecycle.approve, SYSTEM, newer, None)
            wait_for_queue(granter, 1)
            loop = pool.submit(gf.lifecycle.grant_waiting)
            wait_for_queue(granter, 2)
        assert approval.result().state == "approved"
        loop.result()
    assert gf.lifecycle.show_request(SYSTEM, older).state == "active"
