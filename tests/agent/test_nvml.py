"""The `nvml` backend against a fake pynvml (tests/fake_nvml.py): no GPU here, the GPU is the
one thing faked. What is checked is our side: scale, None vs absent, GPM intervals, MIG
units, XID counting, process cadence, errors as problems, operator messages."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.agent.attribution import Attributor
from gpufleet.agent.backend import SourceUnavailable
from gpufleet.agent.host import HostFacts, read_host
from gpufleet.agent.nvml_backend import (
    NvmlBackend,
    NvmlUnavailable,
    mig_profile_of,
)
from gpufleet.clock import ManualClock
from gpufleet.domain.gpu_models import normalise_model
from tests.fake_nvml import (
    ARCH_AMPERE,
    FI_TOTAL_ENERGY_CONSUMPTION,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_UNKNOWN,
    NVML_VALUE_NOT_AVAILABLE_ULONGLONG,
    NVML_VALUE_TYPE_DOUBLE,
    NVML_VALUE_TYPE_UNSIGNED_INT,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeProcess,
)

AT = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)
GIB = 1 << 30
SM_UTIL, GRAPHICS_UTIL, NVLINK_TOTAL_TX, NVLINK_L0_RX, NVLINK_L1_TX = 2, 1, 61, 62, 65
PCIE_RX = 21  # NVML_GPM_METRIC_PCIE_RX_PER_SEC, MiB/s


def hopper(uuid: str = "GPU-h0", **kwargs) -> FakeGpu:
    gpu = FakeGpu(uuid, **kwargs)
    gpu.fields.update({82: (NVML_VALUE_TYPE_UNSIGNED_INT, 61),
                       6: (NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2),
                       94: (NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 7),
                       144: (NVML_VALUE_TYPE_DOUBLE, 0.0)})
    gpu.gpm.update({SM_UTIL: 37.5, GRAPHICS_UTIL: 80.0, NVLINK_TOTAL_TX: 2.0,
                    NVLINK_L1_TX: 1.5, PCIE_RX: 3.0})
    return gpu


def ampere(uuid: str = "GPU-a0", **kwargs) -> FakeGpu:
    return FakeGpu(uuid, name="NVIDIA A100-SXM4-80GB", arch=ARCH_AMPERE, **kwargs)


# The fake GPUs' pids are made up: attribution must not look them up in this machine's
# real /proc (a real process of that pid would lend them its container or Slurm job).
NO_PROCFS = Path("/nonexistent/gpufleet-test-procfs")


def no_host_processes() -> Attributor:
    return Attributor(proc_root=NO_PROCFS, tag_dir=NO_PROCFS)


def backend(*gpus: FakeGpu, **kwargs) -> tuple[NvmlBackend, FakeNvml]:
    fake = FakeNvml(list(gpus))
    kwargs.setdefault("attributor", no_host_processes())
    return NvmlBackend("node-1", lib=fake, clock=ManualClock(AT), **kwargs), fake


def test_values_are_in_catalogue_units():
    nvml, _ = backend(hopper())
    unit = nvml.collect().unit("GPU-h0")
    v = unit.values
    assert v["gpu.power_usage_watts"] == pytest.approx(312.5)  # mW -> W
    assert v["gpu.power_limit_watts"] == pytest.approx(700.0)
    assert v["gpu.energy_joules_total"] == pytest.approx(5000.0)  # mJ -> J
    assert v["gpu.temperature_celsius"] == 54.0
    assert v["gpu.memory_temperature_celsius"] == 61.0  # a field value
    assert v["gpu.memory_used_bytes"] == 20 * GIB
    assert v["gpu.memory_reserved_bytes"] == GIB  # nvmlMemory_v2 asked for
    assert v["gpu.sm_clock_mhz"] == 1980.0 and v["gpu.memory_clock_mhz"] == 2619.0
    assert v["gpu.ecc_uncorrected_errors_total"] == 2.0
    assert v["gpu.utilization"] == 40.0
    assert v["gpu.clock_throttle_reasons"] == 1.0


def test_not_supported_is_none_never_zero_and_unknown_arch_rows_are_absent():
    nvml, _ = backend(ampere())
    v = nvml.collect().unit("GPU-a0").values
    assert "gpu.fan_speed_percent" in v and v["gpu.fan_speed_percent"] is None
    assert v["gpu.ecc_corrected_errors_total"] is None  # field answered NOT_SUPPORTED
    assert v["gpu.remapped_rows_pending"] is None
    # GPM rows exist from Hopper on: an Ampere GPU does not have them at all (absent).
    assert not any(name in v for name in ("gpu.sm_active", "gpu.tensor_active",
                                          "gpu.nvlink_tx_bytes_per_second"))


def test_field_values_are_one_batched_call_per_gpu():
    nvml, fake = backend(hopper("GPU-0"), hopper("GPU-1"))
    nvml.collect()
    assert fake.calls.count("nvmlDeviceGetFieldValues") == 2


def test_gpm_needs_two_samples_hopper_only():
    nvml, fake = backend(hopper(), ampere())
    first = nvml.collect()
    assert first.unit("GPU-h0").values["gpu.sm_active"] is None  # no interval yet
    second = nvml.collect()
    h = second.unit("GPU-h0")
    assert h.values["gpu.sm_active"] == 37.5
    assert h.values["gpu.gr_engine_active"] == 80.0
    assert h.values["gpu.tensor_active"] is None  # GPM answered not supported
    assert h.values["gpu.nvlink_tx_bytes_per_second"] == 2.0 * 1024 * 1024  # MiB/s -> B/s
    # PCIe from GPM too: nvmlDeviceGetPcieThroughput blocks 20 ms a call (the fake lacks it)
    assert h.values["gpu.pcie_rx_bytes_per_second"] == 3.0 * 1024 * 1024
    assert h.values["gpu.pcie_tx_bytes_per_second"] is None  # GPM answered not supported
    link1 = next(lv for lv in h.labelled
                 if lv.metric == "gpu.nvlink_link_tx_bytes_per_second"
                 and lv.labels == {"link": "1"})
    assert link1.value == 1.5 * 1024 * 1024
    assert not {"gpu.sm_active", "gpu.pcie_rx_bytes_per_second"} & set(
        second.unit("GPU-a0").values)  # before Hopper: not read by the nvml backend
    assert "nvmlGpmSampleGet" in fake.calls
    assert fake.samples_alloced == 2  # two buffers per unit, reused after that
    nvml.collect()
    assert fake.samples_alloced == 2
    nvml.close()
    assert fake.samples_freed == 2


def test_mig_units_carry_per_mig_metrics_and_device_metrics_stay_on_the_parent():
    gpu = hopper(migs=[FakeMig("MIG-aaaa", 3, "3g.40gb", gpm={SM_UTIL: 12.0}),
                       FakeMig("MIG-bbbb", 5, "1g.10gb", memory={
                           "total": 10 * GIB, "used": 2 * GIB, "free": 8 * GIB,
                           "reserved": 0})])
    nvml, _ = backend(gpu)
    nvml.collect()
    snap = nvml.collect()
    parent = snap.unit("GPU-h0")
    assert parent.values["gpu.power_usage_watts"] == pytest.approx(312.5)
    assert parent.values["gpu.utilization"] is None  # not supported in MIG mode
    mig = snap.unit("GPU-h0", "MIG-bbbb")
    assert (mig.gpu_instance_id, mig.mig_profile) == (5, "1g.10gb")
    assert mig.values["gpu.memory_used_bytes"] == 2 * GIB
    assert not any(k in mig.values for k in ("gpu.power_usage_watts",
                                              "gpu.temperature_celsius", "gpu.utilization",
                                              "gpu.xid_last_code",
                                              "gpu.nvlink_tx_bytes_per_second"))
    assert mig.labelled == ()
    assert snap.unit("GPU-h0", "MIG-aaaa").values["gpu.sm_active"] == 12.0
    assert [u.mig_uuid for u in snap.units] == [None, "MIG-aaaa", "MIG-bbbb"]


def test_xid_events_are_counted_per_code_across_collects():
    nvml, fake = backend(hopper("GPU-0"), hopper("GPU-1"))
    v = nvml.collect().unit("GPU-0")
    assert v.values["gpu.xid_last_code"] is None
    fake.inject_xid(0, 79)
    fake.inject_xid(0, 48)
    nvml.collect()
    fake.inject_xid(0, 79)
    snap = nvml.collect()
    gpu0 = snap.unit("GPU-0")
    counts = {lv.labels["xid"]: lv.value for lv in gpu0.labelled
              if lv.metric == "gpu.xid_errors_total"}
    assert counts == {"48": 1.0, "79": 2.0}
    assert gpu0.values["gpu.xid_last_code"] == 79.0
    assert not [lv for lv in snap.unit("GPU-1").labelled if lv.metric == "gpu.xid_errors_total"]


def test_an_xid_event_naming_a_gpu_instance_is_counted_on_its_mig_unit():
    """NVML attributes a MIG GPU's XID event to a GPU instance (gpuInstanceId): a contained
    XID 94 is counted on that instance's unit; an event naming no instance, or one the
    backend cannot map to a MIG UUID, stays on the GPU."""
    gpu = hopper(migs=[FakeMig("MIG-aaaa", 3, "3g.40gb"), FakeMig("MIG-bbbb", 5, "3g.40gb")])
    nvml, fake = backend(gpu)
    nvml.collect()
    fake.inject_xid(0, 94, gpu_instance_id=5)
    fake.inject_xid(0, 63)
    fake.inject_xid(0, 94, gpu_instance_id=9)  # no such instance: the GPU's
    snap = nvml.collect()

    def xids(unit) -> dict[str, float]:
        return {lv.labels["xid"]: lv.value for lv in unit.labelled
                if lv.metric == "gpu.xid_errors_total"}

    assert xids(snap.unit("GPU-h0", "MIG-bbbb")) == {"94": 1.0}
    assert xids(snap.unit("GPU-h0", "MIG-aaaa")) == {}
    assert xids(snap.unit("GPU-h0")) == {"63": 1.0, "94": 1.0}


def test_processes_on_a_slower_cadence_and_on_their_mig_unit():
    gpu = hopper(migs=[FakeMig("MIG-aaaa", 3, "3g.40gb")],
                 processes=[FakeProcess(101, 3 * GIB, gpu_instance_id=3),
                            FakeProcess(102, NVML_VALUE_NOT_AVAILABLE_ULONGLONG,
                                        gpu_instance_id=3)],
                 process_util={101: 55})
    nvml, fake = backend(gpu, process_every=3)
    snaps = [nvml.collect() for _ in range(4)]
    assert fake.calls.count("nvmlDeviceGetComputeRunningProcesses") == 2  # collects 1 and 4
    assert snaps[1].unit("GPU-h0", "MIG-aaaa").processes == ()
    procs = {p.pid: p for p in snaps[0].unit("GPU-h0", "MIG-aaaa").processes}
    assert procs[101].values == {"process.memory_used_bytes": 3 * GIB,
                                 "process.sm_utilization": 55.0}
    assert procs[102].values == {"process.memory_used_bytes": None,
                                 "process.sm_utilization": None}
    assert snaps[0].unit("GPU-h0").processes == ()


def test_processes_of_a_whole_gpu_are_on_the_gpu_unit():
    nvml, _ = backend(ampere(processes=[FakeProcess(7, GIB)]))
    unit = nvml.collect().unit("GPU-a0")
    assert [p.pid for p in unit.processes] == [7]


def test_a_lost_gpu_is_all_none_and_a_problem_the_others_still_read():
    lost = hopper("GPU-lost")
    nvml, _ = backend(lost, hopper("GPU-ok"))
    nvml.collect()
    lost.lost = True
    snap = nvml.collect()
    values = snap.unit("GPU-lost").values
    assert values and all(v is None for v in values.values())
    assert "gpu.power_usage_watts" in values
    assert any("GPU-lost is lost" in p for p in snap.problems)
    assert snap.unit("GPU-ok").values["gpu.power_usage_watts"] == pytest.approx(312.5)


def test_an_unexpected_error_on_one_metric_is_one_problem_line_not_a_crash():
    a = hopper("GPU-0", errors={"nvmlDeviceGetPowerUsage": NVML_ERROR_UNKNOWN})
    b = hopper("GPU-1", errors={"nvmlDeviceGetPowerUsage": NVML_ERROR_UNKNOWN})
    a.fields[6] = NVML_ERROR_UNKNOWN
    nvml, _ = backend(a, b)
    snap = nvml.collect()
    assert snap.unit("GPU-0").values["gpu.power_usage_watts"] is None
    assert snap.unit("GPU-0").values["gpu.ecc_uncorrected_errors_total"] is None
    assert snap.unit("GPU-0").values["gpu.temperature_celsius"] == 54.0
    power = [p for p in snap.problems if "nvmlDeviceGetPowerUsage" in p]
    assert len(power) == 1 and "(x2)" in power[0]
    assert any("NVML_FI_DEV_ECC_DBE_AGG_TOTAL" in p for p in snap.problems)
    assert nvml.collect().problems == snap.problems  # said again each collect, once


@pytest.mark.parametrize(("code", "words"), [
    (NVML_ERROR_LIBRARY_NOT_FOUND, "Install the NVIDIA driver"),
    (NVML_ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"),
])
def test_missing_library_or_driver_is_an_operator_message(code, words):
    nvml = NvmlBackend("node-1", lib=FakeNvml([], init_error=code))
    with pytest.raises(NvmlUnavailable, match=words) as caught:
        nvml.collect()
    assert isinstance(caught.value, SourceUnavailable)


def test_missing_pynvml_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(NvmlUnavailable, match="pip install nvidia-ml-py"):
        NvmlBackend("node-1").collect()


def test_real_pynvml_on_a_machine_without_the_driver_says_what_to_install():
    """The real nvidia-ml-py here: this machine has no NVIDIA driver (skipped where it has)."""
    pytest.importorskip("pynvml")
    nvml = NvmlBackend("node-1")
    try:
        nvml.collect()
    except NvmlUnavailable as exc:
        assert "Install the NVIDIA driver" in str(exc) or "driver is not loaded" in str(exc)
    else:
        pytest.skip("NVML works on this machine")
    finally:
        nvml.close()


def test_init_once_shutdown_on_close_and_never_a_set_call():
    gpu = hopper(migs=[FakeMig("MIG-aaaa", 3, "3g.40gb")],
                 processes=[FakeProcess(1, GIB, gpu_instance_id=3)])
    with NvmlBackend("node-1", lib=(fake := FakeNvml([gpu])), clock=ManualClock(AT),
                     attributor=no_host_processes()) as nvml:
        nvml.collect()
        nvml.collect()
    assert fake.calls.count("nvmlInit") == 1 and fake.calls.count("nvmlShutdown") == 1
    assert not fake.initialised
    assert not [c for c in fake.calls if "Set" in c and not c.startswith("nvmlEventSet")
                and not c.startswith("nvmlGpmSample")]


def test_mig_profile_of_a_mig_device_name():
    assert mig_profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert mig_profile_of("NVIDIA H100 80GB HBM3") is None


H100_UUID = "GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"
HOST = HostFacts("0123456789abcdef0123456789abcdef", "gpu-node-1", 128, 2048 * GIB, "Linux 6.8")


def test_discover_reports_gpus_and_mig_instances_as_registration_sends_them():
    whole = hopper("GPU-0b1ad7a1-1111-2222-3333-444455556666", pci_bus_id="00000000:2A:00.0")
    mig = hopper(H100_UUID, migs=[FakeMig("MIG-5f0c1d9e-aaaa-bbbb-cccc-ddddeeeeffff", 9,
                                          "3g.40gb", profile_id=9, placement=(4, 4))])
    fake = FakeNvml([whole, mig])
    registration = NvmlBackend("gpu-node-1", lib=fake, host=lambda: HOST).discover()
    assert (registration.hostname, registration.backend) == ("gpu-node-1", "nvml")
    assert registration.driver_version == "570.124.06"
    first, second = registration.gpus
    assert (first.index, first.pci_bus_id, first.mig_enabled) == (0, "00000000:2A:00.0", False)
    assert first.memory_bytes == 80 * GIB
    assert normalise_model(first.name, first.pci_device_id).known  # the server's model lookup
    (instance,) = second.mig_instances
    assert second.mig_enabled and second.uuid == H100_UUID
    assert (instance.profile_id, instance.placement_start, instance.placement_size) == (9, 4, 4)
    assert (instance.profile_name, instance.gpu_instance_id) == ("3g.40gb", 9)
    assert instance.mig_uuid.startswith("MIG-5f0c1d9e") and instance.compute_instance_id == 0
    assert instance.memory_bytes == 10 * GIB


def test_discover_leaves_a_lost_gpu_out():
    lost = hopper("GPU-0b1ad7a1-1111-2222-3333-444455556666", lost=True)
    registration = NvmlBackend("n", lib=FakeNvml([lost, hopper(H100_UUID)]),
                               host=lambda: HOST).discover()
    assert [g.uuid for g in registration.gpus] == [H100_UUID]


def test_read_host_reads_this_machine():
    host = read_host()
    assert host.hostname and host.machine_id and host.cpu_cores >= 1
    assert host.memory_bytes >= GIB


def test_an_older_driver_without_memory_v2_still_reads_memory():
    gpu = hopper()
    fake = FakeNvml([gpu])
    fake.memory_v2 = False
    v = NvmlBackend("n", lib=fake, clock=ManualClock(AT)).collect().unit("GPU-h0").values
    assert v["gpu.memory_used_bytes"] == 20 * GIB
    assert v["gpu.memory_reserved_bytes"] is None


def test_no_process_samples_is_no_utilisation_not_a_problem():
    for quirk in (0, 6):  # pynvml's NVMLError(NVML_SUCCESS), and NVML_ERROR_NOT_FOUND
        gpu = ampere(processes=[FakeProcess(7, GIB)],
                     errors={"nvmlDeviceGetProcessUtilization": quirk})
        snap = NvmlBackend("n", lib=FakeNvml([gpu]), clock=ManualClock(AT),
                           attributor=no_host_processes()).collect()
        (process,) = snap.unit("GPU-a0").processes
        assert process.values["process.sm_utilization"] is None
        assert snap.problems == ()


def test_gpm_samples_of_a_removed_mig_instance_are_freed():
    gpu = hopper(migs=[FakeMig("MIG-aaaa", 3, "3g.40gb")])
    nvml, fake = backend(gpu)
    nvml.collect()
    nvml.collect()
    assert fake.samples_alloced == 4  # parent and GI 3, two each
    gpu.migs.clear()
    nvml.collect()
    assert fake.samples_freed == 2


def test_costly_counters_are_read_on_slow_ticks_and_held_between():
    """The energy counter costs ~3.9 ms a read on an H200: read with the processes, held
    between (a counter loses no increase; the agent's /metrics keeps its series)."""
    gpu = hopper()
    nvml, fake = backend(gpu, process_every=3)
    energy_reads = []
    real = fake.nvmlDeviceGetFieldValues

    def counting(handle, ids):
        energy_reads.extend(i for i, _ in ids if i == FI_TOTAL_ENERGY_CONSUMPTION)
        return real(handle, ids)

    fake.nvmlDeviceGetFieldValues = counting
    seen = []
    for n in range(6):
        gpu.energy_mj = 1_000_000 * (n + 1)
        seen.append(nvml.collect().unit("GPU-h0").values["gpu.energy_joules_total"])
    assert len(energy_reads) == 2  # collects 0 and 3
    assert seen == [1000.0, 1000.0, 1000.0, 4000.0, 4000.0, 4000.0]


def test_a_call_answered_not_supported_is_not_asked_again_for_a_while():
    nvml, fake = backend(hopper())
    for _ in range(4):
        assert nvml.collect().unit("GPU-h0").values["gpu.fan_speed_percent"] is None
    assert fake.calls.count("nvmlDeviceGetFanSpeed") == 1
