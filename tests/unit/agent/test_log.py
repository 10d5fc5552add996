"""The agent's log: only in a private state dir, never through a link, never raising."""

from __future__ import annotations

import os
import stat

from app.agent import log as agent_log


def test_the_log_is_a_0600_file_in_a_0700_state_dir(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(state))
    old = os.umask(0)
    try:
        agent_log.log("hello")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(state / "agent.log").st_mode) == 0o600
    assert "hello" in (state / "agent.log").read_text()


def test_nothing_is_logged_in_a_state_dir_others_can_reach(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    (shared / "agent.log").symlink_to(mine)
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(shared))
    agent_log.log("hello")  # never raises
    assert mine.read_text() == "mine\n" and os.listdir(shared) == ["agent.log"]


def _state_with_link(tmp_path, monkeypatch, name: str):
    """A private state dir in use whose ``name`` links to a file of ours."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    (state / name).symlink_to(mine)
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(state))
    return state, mine


def test_the_log_never_follows_a_link_even_in_a_private_dir(tmp_path, monkeypatch):
    _state, mine = _state_with_link(tmp_path, monkeypatch, "agent.log")
    agent_log.log("hello")
    assert mine.read_text() == "mine\n"


def test_rotation_renames_and_never_writes_through_a_link(tmp_path, monkeypatch):
    state, mine = _state_with_link(tmp_path, monkeypatch, "agent.log.1")
    big = state / "agent.log"
    big.write_bytes(b"x" * (agent_log.MAX_BYTES + 1))
    os.chmod(big, 0o600)
    agent_log.log("after rotation")
    assert mine.read_text() == "mine\n"
    assert not os.path.islink(state / "agent.log.1")  # the link itself was replaced
    assert os.path.getsize(state / "agent.log.1") == agent_log.MAX_BYTES + 1
    assert "after rotation" in big.read_text()
