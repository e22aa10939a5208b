"""The agent's telemetry spool keeps unacknowledged batches on disk, in order, bounded; the
in-memory spool of the simulated fleet behaves the same (where a restart is not involved)."""

from __future__ import annotations

import pytest

from gpufleet.agent.memory_spool import MemorySpool
from gpufleet.agent.spool import Spool


@pytest.fixture(params=["disk", "memory"])
def make_spool(request, tmp_path):
    def make(max_bytes: int = 1024**2):
        return Spool(tmp_path / "spool", max_bytes) if request.param == "disk" \
            else MemorySpool(max_bytes)
    return make


def test_batches_come_back_oldest_first_until_acknowledged(make_spool):
    spool = make_spool()
    for n in range(3):
        spool.put(f"b{n}", f"payload {n}".encode())
    pending = spool.pending()
    assert [b.batch_id for b in pending] == ["b0", "b1", "b2"]
    assert pending[1].read() == b"payload 1"
    spool.ack(pending[0])
    assert [b.batch_id for b in spool.pending()] == ["b1", "b2"]


def test_a_restarted_agent_replays_what_was_spooled_and_keeps_the_order(tmp_path):
    Spool(tmp_path).put("first", b"1")
    Spool(tmp_path).put("second", b"2")
    (tmp_path / "000000000009-torn.tmp").write_bytes(b"half a bat")  # a crash mid-write
    again = Spool(tmp_path)
    assert [b.batch_id for b in again.pending()] == ["first", "second"]
    assert not list(tmp_path.glob("*.tmp"))
    again.put("third", b"3")
    assert [b.batch_id for b in again.pending()] == ["first", "second", "third"]


def test_a_full_spool_drops_the_oldest_batches_and_counts_them(make_spool):
    spool = make_spool(max_bytes=100)
    for n in range(5):
        spool.put(f"b{n}", bytes(30))
    assert [b.batch_id for b in spool.pending()] == ["b2", "b3", "b4"]
    assert spool.dropped_batches == 2
    assert spool.size_bytes() <= 100


def test_a_batch_larger_than_the_spool_or_with_an_odd_id_is_refused(make_spool):
    spool = make_spool(max_bytes=10)
    with pytest.raises(ValueError, match="exceeds"):
        spool.put("big", bytes(11))
    with pytest.raises(ValueError, match="batch id"):
        spool.put("../escape", b"x")
    assert spool.pending() == []
