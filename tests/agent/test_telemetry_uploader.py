"""The telemetry uploader against a stand-in server: spool first, ack only on an ack, replay
in order, drop what can never be accepted, stop on a rejected credential."""

from __future__ import annotations

import asyncio
import itertools
import logging
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpufleet.agent.client import AgentClient, Unauthorized
from gpufleet.agent.memory_spool import MemorySpool
from gpufleet.agent.spool import Spool
from gpufleet.agent.telemetry_uploader import TelemetryUploader, UploadOutcome
from gpufleet.sim.backend import standalone_backend
from gpufleet.wire import telemetry_batch
from tests.fake_agent_server import FakeServer

SERVER = "http://gpufleet.test"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def registered_server() -> tuple[FakeServer, str]:
    server = FakeServer()
    server.credentials["cred-1"] = "machine-1"
    return server, "cred-1"


def snapshots(count: int, shape: str = "l40s-8"):
    backend = standalone_backend(shape, "node-1", seed=1)
    return [backend.collect(at=START + timedelta(seconds=10 * n)) for n in range(count)]


def ids():
    counter = itertools.count(1)
    return lambda: f"b{next(counter):03d}"


def upload(server: FakeServer, uploader_of, credential: str, rounds: int = 1):
    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            uploader = uploader_of(AgentClient(SERVER, http))
            return uploader, [await uploader.upload(credential) for _ in range(rounds)]
    return asyncio.run(go())


def seeded_uploader(spool, snaps, ticks_per_batch=2, **options):
    def make(client):
        uploader = TelemetryUploader(client, spool, ticks_per_batch=ticks_per_batch,
                                     batch_id=ids(), **options)
        for snapshot in snaps:
            if uploader.add(snapshot):
                uploader.seal()
        uploader.seal()
        return uploader
    return make


def test_batches_are_spooled_then_acknowledged_and_forgotten(tmp_path):
    server, credential = registered_server()
    spool = Spool(tmp_path)
    uploader, outcomes = upload(server, seeded_uploader(spool, snapshots(5)), credential)
    assert outcomes == [UploadOutcome.DONE]
    assert [b.batch_id for b in server.batches] == ["b001", "b002", "b003"]
    assert [len(b.times_ms) for b in server.batches] == [2, 2, 1]
    assert spool.pending() == []
    assert uploader.counters.batches_acknowledged == 3
    assert uploader.counters.samples_stored > 0
    sent = [s for b in server.batches for s in telemetry_batch.snapshots(b)]
    assert [s.at for s in sent] == [s.at for s in snapshots(5)]


def test_an_unavailable_server_keeps_every_batch_and_a_replay_goes_in_order(tmp_path):
    server, credential = registered_server()
    server.telemetry_fail_next = 1
    spool = Spool(tmp_path)
    uploader, outcomes = upload(server, seeded_uploader(spool, snapshots(6)), credential,
                                rounds=2)
    assert outcomes == [UploadOutcome.UNAVAILABLE, UploadOutcome.DONE]
    assert [b.batch_id for b in server.batches] == ["b001", "b002", "b003"]
    assert uploader.counters.uploads_failed == 1
    assert spool.pending() == []


def test_a_lost_acknowledgement_is_replayed_and_counted_once(tmp_path):
    server, credential = registered_server()
    spool = MemorySpool()
    batch = telemetry_batch.columnar("b001", snapshots(1))
    server.batches.append(batch)  # the server stored it, the agent never saw the ack
    spool.put("b001", telemetry_batch.encode(batch))
    uploader, outcomes = upload(server, lambda c: TelemetryUploader(c, spool), credential)
    assert outcomes == [UploadOutcome.DONE]
    assert server.duplicates == ["b001"] and len(server.batches) == 1
    assert uploader.counters.batches_duplicate == 1 and spool.pending() == []


def test_a_refused_batch_is_dropped_logged_and_does_not_block_the_rest(tmp_path, caplog):
    server, credential = registered_server()
    server.refused_batches["b001"] = (422, "invalid_batch")
    spool = Spool(tmp_path)
    with caplog.at_level(logging.ERROR):
        uploader, outcomes = upload(server, seeded_uploader(spool, snapshots(4)), credential)
    assert outcomes == [UploadOutcome.DONE]
    assert [b.batch_id for b in server.batches] == ["b002"]
    assert uploader.counters.batches_refused == 1
    assert "b001 refused by the server" in caplog.text and "invalid_batch" in caplog.text


def stale_inventory_uploads(server, spool, seal_at, register_after):
    """Seal 2 batches at registration `seal_at`, upload, then upload twice more, the node
    registering again after upload number `register_after` (a MIG layout changed)."""
    registrations = [seal_at]
    stale: list[str] = []

    def make(client):
        make_seeded = seeded_uploader(spool, snapshots(4), registrations=lambda: registrations[0],
                                      on_inventory_stale=stale.append)
        return make_seeded(client)

    async def go():
        async with httpx.AsyncClient(transport=server.transport()) as http:
            uploader = make(AgentClient(SERVER, http))
            outcomes = []
            for round_ in range(3):
                outcomes.append(await uploader.upload("cred-1"))
                if round_ + 1 == register_after:
                    server.stale_registrations -= 1  # what registering tells the server
                    registrations[0] += 1
            return uploader, outcomes
    uploader, outcomes = asyncio.run(go())
    return uploader, outcomes, stale


def test_a_batch_naming_unregistered_gpus_waits_for_the_node_to_register_again(tmp_path):
    server, _ = registered_server()
    server.stale_registrations = 1
    spool = Spool(tmp_path)
    uploader, outcomes, stale = stale_inventory_uploads(server, spool, seal_at=1,
                                                        register_after=2)
    assert outcomes == [UploadOutcome.REGISTERING, UploadOutcome.REGISTERING,
                        UploadOutcome.DONE]
    assert server.requests.count("/api/v1/telemetry/batches") == 1 + 2  # no retry before
    assert [b.batch_id for b in server.batches] == ["b001", "b002"]  # nothing lost, in order
    assert stale and uploader.counters.batches_refused == 0 and spool.pending() == []


def test_a_batch_sealed_before_the_latest_registration_is_dropped_when_refused(tmp_path):
    server, _ = registered_server()
    server.stale_registrations = 10  # the GPUs it names are gone for good
    spool = MemorySpool()
    uploader, outcomes, stale = stale_inventory_uploads(server, spool, seal_at=1,
                                                        register_after=1)
    # Held once, refused again after the node registered, then the second batch (also
    # sealed before that registration) at once: neither can block the spool.
    assert outcomes == [UploadOutcome.REGISTERING, UploadOutcome.DONE, UploadOutcome.DONE]
    assert uploader.counters.batches_refused == 2 and spool.pending() == []
    assert server.batches == [] and stale


def test_a_corrupt_spooled_batch_is_refused_and_dropped(tmp_path):
    server, credential = registered_server()
    spool = Spool(tmp_path)
    spool.put("broken", b"not gzip at all")
    uploader, outcomes = upload(server, seeded_uploader(spool, snapshots(2)), credential)
    assert outcomes == [UploadOutcome.DONE]
    assert [b.batch_id for b in server.batches] == ["b001"]
    assert uploader.counters.batches_refused == 1


def test_a_server_without_the_endpoint_keeps_the_batches(tmp_path):
    server, credential = registered_server()
    server.telemetry_status = 404
    spool = MemorySpool()
    _, outcomes = upload(server, seeded_uploader(spool, snapshots(2)), credential)
    assert outcomes == [UploadOutcome.UNAVAILABLE]
    assert len(spool.pending()) == 1


def test_a_rejected_credential_raises_and_keeps_the_batches():
    server, _ = registered_server()
    spool = MemorySpool()
    with pytest.raises(Unauthorized):
        upload(server, seeded_uploader(spool, snapshots(2)), "revoked")
    assert len(spool.pending()) == 1


def test_a_batch_over_the_size_cap_is_split_into_smaller_ones():
    server, credential = registered_server()
    spool = MemorySpool()
    one_tick = len(telemetry_batch.encode(telemetry_batch.columnar("x", snapshots(1))))
    cap = int(one_tick * 1.3)  # columnar ticks compress well: a few fit, not eight
    make = seeded_uploader(spool, snapshots(8), ticks_per_batch=8, max_batch_bytes=cap)
    upload(server, make, credential)
    assert len(server.batches) >= 2
    assert sum(len(b.times_ms) for b in server.batches) == 8
    assert all(len(telemetry_batch.encode(b)) <= cap for b in server.batches)


def test_the_sample_cap_seals_a_batch_early():
    spool = MemorySpool()
    uploader = TelemetryUploader(AgentClient(SERVER, httpx.AsyncClient()), spool,
                                 ticks_per_batch=100, max_samples_per_batch=500)
    ticks = snapshots(3)
    assert uploader.add(ticks[0]) is False  # an l40s-8 tick is ~350 samples
    assert uploader.add(ticks[1]) is True


def test_a_full_memory_spool_drops_the_oldest():
    spool = MemorySpool(max_bytes=10)
    spool.put("a", b"12345")
    spool.put("b", b"12345")
    spool.put("c", b"123")
    assert [b.batch_id for b in spool.pending()] == ["b", "c"]
    assert spool.dropped_batches == 1
