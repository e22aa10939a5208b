"""The node credential is stored owner-only and survives a restart."""

from __future__ import annotations

import stat

from gpufleet.agent.state import AgentState


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credential_is_written_mode_600_in_a_700_dir_and_read_back(tmp_path):
    state_dir = tmp_path / "var" / "gpufleet-agent"
    state = AgentState(state_dir)
    assert state.read_credential() is None
    state.save_credential("gfa_secret")
    assert mode(state_dir) == 0o700
    assert mode(state.credential_path) == 0o600
    assert AgentState(state_dir).read_credential() == "gfa_secret"
    state.save_credential("gfa_rotated")
    assert AgentState(state_dir).read_credential() == "gfa_rotated"
    assert mode(state.credential_path) == 0o600
    assert [p.name for p in state_dir.iterdir()] == ["credential"]  # no temporary left


def test_an_existing_state_dir_is_left_as_it_is(tmp_path):
    tmp_path.chmod(0o755)
    AgentState(tmp_path).save_credential("x")
    assert mode(tmp_path) == 0o755
    assert mode(tmp_path / "credential") == 0o600


def test_a_too_open_credential_is_read_with_a_warning(tmp_path, caplog):
    state = AgentState(tmp_path)
    state.save_credential("x")
    state.credential_path.chmod(0o644)
    assert state.read_credential() == "x"
    assert "readable by other users" in caplog.text
    state.forget_credential()
    assert state.read_credential() is None
