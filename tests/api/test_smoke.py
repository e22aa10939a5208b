from tests.helpers import create_environment, register


def test_register_and_summarise(api):
    create_environment(api)
    reply = register(api, 1)
    assert reply["credential"].startswith("gfa_")
    summary = api.get("/api/v1/fleet/summary").json()
    assert summary["total_gpus"] == 8
    assert summary["by_environment"][0]["environment"] == "onprem-hpc"
