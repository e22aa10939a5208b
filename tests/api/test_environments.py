from tests.helpers import create_environment, register


def test_environment_counts_leave_out_retired_nodes_like_the_summary(api):
    create_environment(api)
    register(api, 1)
    register(api, 2)
    assert api.post("/api/v1/nodes/node-2/retire", json={"reason": "rma"}).status_code == 200
    (environment,) = api.get("/api/v1/environments").json()["items"]
    summary = api.get("/api/v1/fleet/summary").json()
    assert (environment["nodes"], environment["gpus"]) == (1, 8)
    assert summary["by_environment"][0]["total_gpus"] == environment["gpus"]
    assert summary["retired_gpus"] == 8
