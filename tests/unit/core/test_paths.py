"""The state directory: the agent's rule, and one line when it is refused."""

from __future__ import annotations

import os
import stat

import pytest

from app.core import paths


def test_the_default_state_dir_is_made_private_and_an_own_loose_one_tightened(tmp_path,
                                                                              monkeypatch):
    monkeypatch.delenv("VRAM_STEWARD_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    default = tmp_path / "vram-steward"
    assert paths.state_notice() is None and not default.exists()  # creates nothing
    assert paths.private_state_dir() == str(default)
    os.chmod(default, 0o755)
    assert paths.state_notice() is None
    assert stat.S_IMODE(os.lstat(default).st_mode) == 0o700


def test_a_named_state_dir_others_can_reach_is_refused_in_one_line(tmp_path, monkeypatch):
    named = tmp_path / "named"
    named.mkdir()
    os.chmod(named, 0o770)
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(named))
    assert paths.state_notice() == (
        f"vram-steward: {named} (VRAM_STEWARD_STATE_DIR) is open to group/others (mode 770): "
        "refused; history, OOM reports, recordings and agent.log are neither read nor "
        "written there")
    with pytest.raises(paths.UnsafeDir):
        paths.ensure_state_subdir("oom-reports")
    assert list(named.iterdir()) == []
    assert stat.S_IMODE(os.lstat(named).st_mode) == 0o770  # the user named it: left as it is
