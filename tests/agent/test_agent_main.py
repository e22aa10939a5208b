"""`gpufleet agent` wiring: backends by name, one-line setup errors, --once's exit code,
the dcgm-exporter inventory and the read-only nodes' answer to MIG plans."""

from __future__ import annotations

import gc

import httpx
import pytest

from gpufleet import agent_main
from gpufleet.agent.backend import SourceUnavailable
from gpufleet.agent.dcgm_exporter import DcgmExporterBackend
from gpufleet.agent.dcgm_inventory import fetch_registration, registration_from_page
from gpufleet.agent.host import HostFacts
from gpufleet.agent.read_only_node import MigPlanNotApplied, ReadOnlyNode
from gpufleet.wire.agent import DesiredState
from tests.paths import DATA_DIR

PAGES = DATA_DIR / "dcgm_exporter"
HOST = HostFacts("machine-1", "a100-mig-03", 64, 512 * 1024**3, "Linux 6.8")


@pytest.fixture(autouse=True)
def _unfreeze():
    yield
    gc.unfreeze()  # main() freezes the heap after start-up, as a real agent does


def run_main(tmp_path, backend="sim", **options) -> int:
    return agent_main.main(backend=backend, server="http://127.0.0.1:9", join_token="join-x",
                           state_dir=tmp_path, **options)


def test_nvml_without_a_driver_is_one_clear_line(tmp_path, capsys):
    assert run_main(tmp_path, "nvml") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: nvml backend:") and err.count("\n") == 1
    assert "Traceback" not in err


def test_dcgm_exporter_needs_its_url(tmp_path, capsys):
    assert run_main(tmp_path, "dcgm-exporter") == 2
    assert "--dcgm-exporter-url" in capsys.readouterr().err
    assert run_main(tmp_path, "dcgm-exporter", dcgm_exporter_url="ftp://x") == 2


def test_an_unknown_backend_or_bad_interval_is_refused(tmp_path, capsys):
    assert run_main(tmp_path, "rocm") == 2
    assert run_main(tmp_path, collect_interval_s=0) == 2
    assert "interval" in capsys.readouterr().err


def test_a_server_url_that_is_not_http_is_one_clear_line(tmp_path, capsys):
    assert agent_main.main(backend="sim", server=["http://127.0.0.1:9", "gpufleet-b:8080"],
                           join_token="join-x", state_dir=tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --server: server URL 'gpufleet-b:8080'") and \
        err.count("\n") == 1


def test_once_against_replicas_that_do_not_answer_fails_with_a_message(tmp_path, capsys):
    assert agent_main.main(backend="sim", server="http://127.0.0.1:9,http://127.0.0.1:7",
                           join_token="join-x", state_dir=tmp_path, once=True) == 1
    assert "error: registration failed" in capsys.readouterr().err


def test_once_against_a_server_that_does_not_answer_fails_with_a_message(tmp_path, capsys):
    assert run_main(tmp_path, once=True, sim_shape="l40s-8") == 1
    assert "error: registration failed" in capsys.readouterr().err


def test_the_dcgm_exporter_page_gives_the_inventory():
    registration = registration_from_page((PAGES / "a100_mig.txt").read_text(), HOST)
    assert registration.backend == "dcgm-exporter"
    assert registration.driver_version == "535.183.06"
    first, second = registration.gpus
    assert (first.index, first.uuid) == (0, "GPU-7099682b-a20d-2bcc-74ab-b9060454d81e")
    assert first.name == "NVIDIA A100-SXM4-40GB" and first.mig_enabled
    assert sorted((m.gpu_instance_id, m.profile_name, m.profile_id)
                  for m in first.mig_instances) == [
        (1, "3g.20gb", 9), (5, "2g.10gb", 14), (13, "1g.5gb", 19), (14, "1g.5gb", 19)]
    assert second.index == 1


def test_the_8_gpu_page_has_memory_and_pci_ids():
    registration = registration_from_page((PAGES / "h100_8gpu.txt").read_text(), HOST)
    assert [g.index for g in registration.gpus] == list(range(8))
    assert all(g.memory_bytes and g.memory_bytes > 70 * 1024**3 for g in registration.gpus)
    assert registration.gpus[0].pci_bus_id == "00000000:18:00.0"


def test_labels_that_are_digits_but_not_numbers_are_skipped_not_raised():
    # "²".isdigit() is True and int("²") raises: such a series is not a GPU's.
    uuid = "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
    good = f'UUID="{uuid}",gpu="0",modelName="NVIDIA H100 80GB HBM3"'
    text = "\n".join([
        f'DCGM_FI_DEV_FB_TOTAL{{{good}}} 81559',
        'DCGM_FI_DEV_FB_TOTAL{UUID="GPU-8d2f6a1e-3b4c-4e5f-9a0b-1c2d3e4f5a6b",gpu="²"} 1',
        f'DCGM_FI_DEV_FB_USED{{{good},GPU_I_ID="²",GPU_I_PROFILE="1g.10gb"}} 10',
    ]) + "\n"
    registration = registration_from_page(text, HOST)
    (gpu,) = registration.gpus
    assert (gpu.uuid, gpu.index, gpu.memory_bytes) == (uuid, 0, 81559 * 1024**2)
    assert not gpu.mig_enabled


def test_the_inventory_is_read_through_the_exporters_own_scrape():
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=(PAGES / "h100_8gpu.txt").read_text())

    client = httpx.Client(transport=httpx.MockTransport(answer))
    up = DcgmExporterBackend("http://up:9400", "n", client=client)
    assert len(fetch_registration(up, HOST).gpus) == 8
    down = DcgmExporterBackend("http://down:9400", "n", client=client)
    with pytest.raises(SourceUnavailable, match="dcgm-exporter at http://down:9400/metrics"):
        fetch_registration(down, HOST)


def test_a_page_naming_gpus_that_cannot_be_registered_is_reported_not_raised():
    bad = 'DCGM_FI_DEV_FB_TOTAL{UUID="not a gpu uuid",gpu="0"} 81559\n'
    client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, text=bad)))
    exporter = DcgmExporterBackend("http://odd:9400", "n", client=client)
    with pytest.raises(SourceUnavailable, match="cannot be registered: uuid: String should match"):
        fetch_registration(exporter, HOST)


def test_a_read_only_node_takes_bindings_and_refuses_another_mig_layout():
    registration = registration_from_page((PAGES / "h100_8gpu.txt").read_text(), HOST)
    node = ReadOnlyNode("dcgm-exporter", lambda: registration, source=None)
    node.apply_desired_state(DesiredState(version=3, bindings=[]))  # accepted: no raise
    plan = {"gpu_uuid": registration.gpus[0].uuid,
            "instances": [{"profile_id": 0, "placement_start": 0}]}
    with pytest.raises(MigPlanNotApplied, match="nvidia-smi mig"):
        node.apply_desired_state(DesiredState.model_validate(
            {"version": 4, "mig_plans": [plan]}))


def test_the_cli_and_the_agent_flags_share_one_set_of_defaults():
    import inspect

    from gpufleet.agent.telemetry_loop import TelemetryOptions
    from gpufleet.cli.commands.processes import agent

    cli = inspect.signature(agent).parameters
    flags = agent_main.AgentFlags()
    assert cli["backend"].default == flags.backend == "sim"
    for name in ("collect_interval_s", "upload_interval_s", "spool_max_mb"):
        assert cli[name].default == getattr(flags, name), name
    options = agent_main.telemetry_options(flags)
    assert options == TelemetryOptions()
