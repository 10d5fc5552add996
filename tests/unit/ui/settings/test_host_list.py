"""The Hosts dialog's data and words: saved and for-this-run hosts, the
Fleet's keys, a host checked before it is added, a policy's changes."""

from __future__ import annotations

import os

import pytest

from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView
from app.core.policies.thresholds import (
    POLICY_MIN_IDLE_MAX_S,
    POLICY_THRESHOLD_MAX,
    POLICY_THRESHOLD_MIN,
)
from app.core.remote.host_config import HostConfig
from app.core.remote.policy import RemotePolicy
from app.ui.settings.host_list import (
    FOR_THIS_RUN,
    IDLE_MIN_RANGE,
    SAVED,
    THRESHOLD_PCT_RANGE,
    added,
    host_entries,
    policy_changes,
    policy_line,
    policy_values,
    reason_line,
    removed,
    state_line,
    watched_hosts,
)

GPU1 = HostConfig("https://gpu1:8443")
GPU2 = HostConfig("ssh://alice@gpu2")
POLICY = RemotePolicy(True, 0.9, 0.85, 300.0, 30.0, may_change=True)


def test_entries_are_the_saved_hosts_then_those_given_for_this_run():
    entries = host_entries([GPU1], [GPU2, GPU1], [HostView("gpu2", GPU2.url, CONNECTED)])
    assert [(e.key, e.tag) for e in entries] == [("gpu1:8443", SAVED), ("gpu2", FOR_THIS_RUN)]
    assert entries[0].view is None and entries[1].connected
    assert watched_hosts([GPU1], [GPU2, GPU1]) == [GPU1, GPU2]


def test_a_host_is_checked_before_it_is_added(tmp_path):
    assert added([GPU1], [], HostConfig(" ssh://bob@gpu3 ")) == (
        GPU1, HostConfig("ssh://bob@gpu3"))
    with pytest.raises(ValueError, match="expected ssh://") as info:
        added([GPU1], [], HostConfig("gpu3"))
    assert not str(info.value).startswith("--host")
    with pytest.raises(ValueError, match="already in the list"):
        added([GPU1], [], HostConfig("https://gpu1:8443/"))
    with pytest.raises(ValueError, match="already in the list"):  # given for this run
        added([], [GPU2], HostConfig("ssh://alice@gpu2"))
    token = tmp_path / "token"
    token.write_text("k" * 24)
    os.chmod(token, 0o644)
    with pytest.raises(ValueError, match="others may read it"):
        added([], [], HostConfig("https://gpu3:8443", token_file=str(token)))
    assert removed([GPU1, GPU2], GPU1.url) == (GPU2,)


def test_row_lines_say_the_state_why_and_the_servers_policy():
    up = HostView("gpu1:8443", GPU1.url, CONNECTED, 0.0, name="gpu-box-1", user="alice",
                  policy=POLICY)
    (entry,) = host_entries([GPU1], [], [up])
    assert state_line(entry) == "connected · as alice on gpu-box-1"
    assert reason_line(entry) == ""
    assert policy_line(entry) == "Auto-unload on at 90 %, idle ≥ 5 min (the server's)"
    down = HostView("gpu1:8443", GPU1.url, DISCONNECTED, 0.0, "connection refused:\n  is serve up?")
    (entry,) = host_entries([GPU1], [], [down])
    assert state_line(entry).startswith("disconnected since ")
    assert reason_line(entry) == "connection refused: is serve up?"
    assert policy_line(entry) == ""
    (entry,) = host_entries([GPU1], [], [])
    assert state_line(entry) == "connecting…"
    (entry,) = host_entries([GPU1], [], [HostView("gpu1:8443", GPU1.url, CONNECTED, 0.0,
                                                  user="anonymous")])
    assert state_line(entry) == "connected · read only (no token)"


def test_a_policy_form_sends_only_what_changed():
    assert policy_changes(POLICY, True, 90, 5) == {}
    assert policy_changes(POLICY, False, 80, 10) == {"enabled": False, "threshold": 0.8,
                                                     "min_idle_s": 600.0}
    off = RemotePolicy(False, 0.9, 0.85, 300.0, 30.0)
    assert off.text() == "Auto-unload off"


def test_the_forms_ranges_are_the_servers_bounds():
    assert (round(POLICY_THRESHOLD_MIN * 100),
                                   round(POLICY_THRESHOLD_MAX * 100)) == THRESHOLD_PCT_RANGE
    assert IDLE_MIN_RANGE == (0, POLICY_MIN_IDLE_MAX_S / 60)


def test_a_value_the_form_rounds_is_not_sent_back_unless_changed():
    odd = RemotePolicy(True, 0.875, 0.8, 90.0, 30.0)  # 87.5 %, 1.5 min: shown 88 %, 2 min
    assert policy_values(odd) == (True, 88, 2)
    assert policy_changes(odd, True, 88, 2) == {}
    assert policy_changes(odd, True, 88, 3) == {"min_idle_s": 180.0}  # only what changed
    low = RemotePolicy(False, 0.3, 0.25, 2 * 86400.0, 30.0)  # outside the old 50 %, 24 h
    assert policy_values(low) == (False, 30, 2880)
    assert policy_changes(low, True, 30, 2880) == {"enabled": True}
    assert RemotePolicy(False, 0, 0, 0, 0, available=False).text().startswith("Auto-unload: none")
