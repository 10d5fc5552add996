"""A host's policy form: the server's bounds as its ranges, only what the user
changed sent, the server's policy followed while the user edits nothing (and
never under the user's edits), and the server's words shown as text."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import Qt

from app.core.monitor.hosts import CONNECTED, HostView
from app.core.remote.host_config import HostConfig
from app.core.remote.policy import RemotePolicy
from app.ui.settings.host_list import IDLE_MIN_RANGE, THRESHOLD_PCT_RANGE, host_entries
from app.ui.settings.host_policy_form import HostPolicyForm

GPU1 = HostConfig("https://gpu1:8443")
ON = RemotePolicy(True, 0.9, 0.85, 300.0, 30.0, may_change=True)


def entry(policy):
    (e,) = host_entries([GPU1], [], [HostView("gpu1:8443", GPU1.url, CONNECTED, 0.0,
                                              policy=policy)])
    return e


@pytest.fixture
def form(qtbot):
    f = HostPolicyForm()
    qtbot.addWidget(f)
    sent = []
    f.apply_requested.connect(lambda key, changes: sent.append((key, changes)))
    return f, sent


def test_the_ranges_are_the_servers_bounds_and_its_values_are_shown_unclamped(form):
    f, sent = form
    assert (f.threshold_spin.minimum(), f.threshold_spin.maximum()) == THRESHOLD_PCT_RANGE
    assert (f.idle_spin.minimum(), f.idle_spin.maximum()) == IDLE_MIN_RANGE
    f.set_entry(entry(RemotePolicy(True, 0.3, 0.25, 2 * 86400.0, 30.0, may_change=True)))
    assert (f.threshold_spin.value(), f.idle_spin.value()) == (30, 2880)
    assert f.changes() == {} and not f.apply_button.isEnabled()


def test_only_what_the_user_changed_is_sent(form):
    f, sent = form
    f.set_entry(entry(RemotePolicy(True, 0.875, 0.8, 90.0, 30.0, may_change=True)))
    assert f.changes() == {}  # 87.5 % shown as 88 %, 90 s as 2 min: nothing changed
    f.idle_spin.setValue(10)
    f.apply_button.click()
    assert sent == [("gpu1:8443", {"min_idle_s": 600.0})]


def test_the_form_follows_the_server_while_the_user_edits_nothing(form):
    f, _ = form
    low = dataclasses.replace(ON, threshold=0.3, min_idle_s=2 * 86400.0)
    f.set_entry(entry(low))
    assert f.enabled_box.isChecked()
    f.set_entry(entry(dataclasses.replace(low, enabled=False)))  # turned off on the server
    assert not f.enabled_box.isChecked() and not f.threshold_spin.isEnabled()
    f.set_entry(entry(dataclasses.replace(ON, threshold=0.8, min_idle_s=600.0)))
    assert f.enabled_box.isChecked() and f.threshold_spin.value() == 80
    assert f.idle_spin.value() == 10 and f.changes() == {}


def test_the_users_edits_are_kept_when_the_server_changes(form):
    f, sent = form
    f.set_entry(entry(ON))
    f.threshold_spin.setValue(75)
    f.set_entry(entry(dataclasses.replace(ON, min_idle_s=600.0)))
    assert f.threshold_spin.value() == 75 and f.idle_spin.value() == 5
    assert f.changes() == {"threshold": 0.75}
    # No longer the user's to change: the edits stay, nothing can be sent.
    f.set_entry(entry(dataclasses.replace(ON, may_change=False, why_not="only root may")))
    assert f.threshold_spin.value() == 75 and not f.apply_button.isEnabled()
    assert "Not yours to change: only root may." in f.note.text()
    f.apply_button.click()
    assert sent == []


def test_the_servers_words_are_shown_as_text(form):
    f, _ = form
    hostile = "<b>x</b> <img src=/etc/x>"
    f.set_entry(entry(RemotePolicy(False, 0.9, 0.85, 300.0, 30.0, available=False,
                                   why_not=hostile)))
    assert f.note.textFormat() == Qt.TextFormat.PlainText
    assert f.note.text() == f"{hostile}."
    f.set_entry(entry(ON))
    f.set_answer("gpu1:8443", None, hostile)
    assert f.status.textFormat() == Qt.TextFormat.PlainText
    assert f.status.text() == f"Not changed: {hostile}"
