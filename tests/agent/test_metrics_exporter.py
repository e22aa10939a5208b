"""The agent's /metrics in dcgm-exporter's names: scraped over HTTP and read back with the
repo's own dcgm-exporter parser, the values come back as the snapshot had them."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpufleet.agent.dcgm_exporter import mig_uuids_of, snapshot_from_text
from gpufleet.agent.dcgm_inventory import registration_from_page
from gpufleet.agent.host import HostFacts
from gpufleet.agent.metrics_exporter import MetricsServer, SnapshotCollector
from gpufleet.agent.prometheus_text import parse_page
from gpufleet.agent.telemetry_uploader import TelemetryCounters
from gpufleet.sim.backend import standalone_backend

AT = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def collector_for(shape: str, bound: bool = False):
    backend = standalone_backend(shape, f"{shape}-1", seed=3)
    registration = backend.discover()
    snapshot = backend.collect(at=AT)
    collector = SnapshotCollector(registration.hostname, TelemetryCounters())
    collector.use_inventory(registration)
    collector.update(snapshot)
    return collector, snapshot, registration


def page(collector: SnapshotCollector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def comparable(snapshot):
    return {(u.gpu_uuid, u.mig_uuid): (
        {k: v for k, v in u.values.items() if v is not None},
        {(lv.metric, tuple(sorted(lv.labels.items()))): lv.value for lv in u.labelled
         if lv.value is not None})
        for u in snapshot.units}


@pytest.mark.parametrize("shape", ["dgx-h100", "mig-h100", "hgx-a100"])
def test_scraped_values_read_back_as_the_snapshot(shape):
    collector, snapshot, registration = collector_for(shape)
    server = MetricsServer(collector, port=0, address="127.0.0.1")
    try:
        text = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
    finally:
        server.close()
    read_back = snapshot_from_text(text, snapshot.node, AT, mig_uuids_of(registration))
    assert comparable(read_back).keys() == comparable(snapshot).keys()
    for key, (values, labelled) in comparable(snapshot).items():
        back_values, back_labelled = comparable(read_back)[key]
        assert back_values == pytest.approx(values), key
        assert back_labelled == pytest.approx(labelled), key


@pytest.mark.parametrize("shape", ["dgx-h100", "mig-h100"])
def test_the_inventory_reads_back_from_the_agents_own_page(shape):
    # The writer's labels and the dcgm-exporter backend's inventory reader share names.
    collector, _, registration = collector_for(shape)
    host = HostFacts("m", registration.hostname, 8, 64 * 1024**3, "Linux")
    read_back = registration_from_page(page(collector), host)
    assert read_back.driver_version == registration.driver_version
    assert [(g.index, g.uuid, g.name, g.pci_bus_id, g.memory_bytes) for g in read_back.gpus] \
        == [(g.index, g.uuid, g.name, g.pci_bus_id, g.memory_bytes) for g in registration.gpus]
    assert [sorted((m.gpu_instance_id, m.profile_id) for m in g.mig_instances)
            for g in read_back.gpus] == \
        [sorted((m.gpu_instance_id, m.profile_id) for m in g.mig_instances)
         for g in registration.gpus]


def test_names_units_and_labels_are_dcgm_exporters():
    collector, snapshot, registration = collector_for("mig-h100")
    samples = parse_page(page(collector)).samples
    gpu = registration.gpus[0]
    parent = snapshot.unit(gpu.uuid)
    used = next(s for s in samples if s.name == "DCGM_FI_DEV_FB_USED"
                and s.labels["UUID"] == gpu.uuid and "GPU_I_ID" not in s.labels)
    assert used.value == pytest.approx(parent.values["gpu.memory_used_bytes"] / 2**20)  # MiB
    assert used.labels["gpu"] == str(gpu.index)
    assert used.labels["device"] == f"nvidia{gpu.index}"
    assert used.labels["modelName"] == gpu.name
    assert used.labels["Hostname"] == registration.hostname
    instance = next(u for u in snapshot.units if u.is_mig and
                    u.values.get("gpu.sm_active") is not None)
    sm = next(s for s in samples if s.name == "DCGM_FI_PROF_SM_ACTIVE"
              and s.labels.get("GPU_I_ID") == str(instance.gpu_instance_id)
              and s.labels["UUID"] == instance.gpu_uuid)
    assert sm.value == pytest.approx(instance.values["gpu.sm_active"] / 100)  # a 0-1 ratio
    assert sm.labels["GPU_I_PROFILE"] == instance.mig_profile
    assert not any(s.name == "DCGM_FI_DEV_POWER_USAGE" and "GPU_I_ID" in s.labels
                   for s in samples)  # device-only: on the parent GPU alone


def test_missing_values_are_left_out_and_the_agent_counts_are_there():
    collector, snapshot, _ = collector_for("l40s-8")
    collector.counters.batches_acknowledged = 4
    text = page(collector)
    unit = snapshot.units[0]
    missing = [m for m, v in unit.values.items() if v is None]
    assert missing  # an L40S has no HBM temperature sensor
    assert "DCGM_FI_DEV_MEMORY_TEMP{" not in text
    assert "gpufleet_agent_batches_acknowledged_total 4.0" in text


def test_before_the_first_snapshot_only_the_agent_series_are_there():
    collector = SnapshotCollector("node-1", TelemetryCounters(), spooled_batches=lambda: 2)
    text = page(collector)
    assert "DCGM_" not in text
    assert "gpufleet_agent_spooled_batches 2.0" in text
