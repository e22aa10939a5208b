"""The server's reclaim loop (api/app.py) runs the round on its cadence and outlives a
round that fails."""

from __future__ import annotations

import asyncio

import pytest

from gpufleet.api.app import _reclaim_loop
from gpufleet.settings import Settings
from tests.services.operations import test_reclamation
from tests.services.operations.test_reclamation import IDLE

world = test_reclamation.world  # the reclamation tests' fixture: a node, vision, mia


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path / "data", reclaim_interval_s=0.01)


async def _until(condition, rounds: int = 500) -> bool:
    for _ in range(rounds):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_the_loop_warns_an_idle_allocation_and_survives_a_failing_round(world, gf,
                                                                         monkeypatch):
    code, gpus = world.allocate(1)
    world.run(70, dict.fromkeys(gpus, IDLE))
    real_tick, calls = gf.reclaim.tick, []

    def tick():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in one round")
        return real_tick()

    monkeypatch.setattr(gf.reclaim, "tick", tick)

    async def scenario() -> bool:
        task = asyncio.create_task(_reclaim_loop(gf))
        try:
            return await _until(lambda: bool(world.warnings(code)))
        finally:
            task.cancel()

    assert asyncio.run(scenario())
    assert len(calls) >= 2
