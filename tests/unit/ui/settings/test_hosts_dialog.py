"""Hosts…: hosts added (checked first), removed, shown with their state from
the latest snapshot; a host's policy changed on its server from a worker
thread, the server's answer or refusal shown."""

from __future__ import annotations

import os
import threading

import pytest

from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView
from app.core.remote.errors import RemoteError
from app.core.remote.host_config import HostConfig
from app.core.remote.policy import RemotePolicy
from app.ui.settings.add_host_dialog import AddHostDialog
from app.ui.settings.hosts_dialog import HostsDialog
from app.ui.settings.policy_courier import PolicyCourier

SAVED = HostConfig("https://gpu1:8443")
GIVEN = HostConfig("ssh://alice@gpu2")
POLICY = RemotePolicy(True, 0.9, 0.85, 300.0, 30.0, may_change=True)


@pytest.fixture
def dialog(qtbot):
    views = [HostView("gpu1:8443", SAVED.url, CONNECTED, 0.0, user="alice", policy=POLICY),
             HostView("gpu2", GIVEN.url, DISCONNECTED, 0.0, "connection refused: is serve up?")]
    d = HostsDialog([SAVED], [GIVEN], views)
    qtbot.addWidget(d)
    changed = []
    d.hosts_changed.connect(changed.append)
    return d, changed


def test_rows_show_each_hosts_state_reason_and_whether_it_is_kept(dialog):
    d, _ = dialog
    one, two = d.rows["gpu1:8443"], d.rows["gpu2"]
    assert one.tag_label.text() == "saved" and two.tag_label.text() == "for this run"
    assert one.state_label.text() == "connected · as alice"
    assert one.policy_label.text().startswith("Auto-unload on at 90 %")
    assert two.state_label.text().startswith("disconnected since")
    assert two.reason_label.text() == "connection refused: is serve up?"
    assert not d.policy_form.controls.isHidden()
    d.select("gpu2")
    assert not d.remove_button.isEnabled()  # given with --host: not the settings' to remove
    assert "for this run" in d.remove_button.toolTip()
    assert d.policy_form.controls.isHidden()  # no policy known: no controls to show
    assert "once it is connected" in d.policy_form.note.text()


def test_a_valid_host_is_added_and_handed_on(dialog):
    d, changed = dialog
    assert d.add_host(HostConfig("ssh://bob@gpu3")) is None
    assert changed == [(SAVED, HostConfig("ssh://bob@gpu3"))]
    assert list(d.rows) == ["gpu1:8443", "gpu3", "gpu2"]
    assert d.selected == "gpu3" and d.rows["gpu3"].state_label.text() == "connecting…"


def test_a_bad_url_or_a_token_file_others_may_read_changes_nothing(dialog, tmp_path):
    d, changed = dialog
    add = AddHostDialog(d.add_host, d)
    add.url_edit.setText("gpu3:8443")
    add.accept()
    assert add.result() != add.DialogCode.Accepted and add.added is None
    assert "expected ssh://" in add.error_label.text() and not add.error_label.isHidden()
    token = tmp_path / "token"
    token.write_text("k" * 24)
    os.chmod(token, 0o644)
    add.url_edit.setText("https://gpu3:8443")
    add.token_edit.setText(str(token))
    add.accept()
    assert "others may read it (chmod 600" in add.error_label.text()
    assert changed == [] and d.saved == (SAVED,)
    os.chmod(token, 0o600)
    add.accept()
    assert add.added == HostConfig("https://gpu3:8443", token_file=str(token))
    assert changed == [(SAVED, add.added)]


def test_the_add_dialog_offers_the_fields_of_the_urls_scheme(qtbot):
    add = AddHostDialog(lambda config: None)
    qtbot.addWidget(add)
    add.url_edit.setText("ssh://alice@gpu2")
    add.token_edit.setText("/somewhere/token")
    add.command_edit.setText("~/venv/bin/vram-steward")
    assert not add.token_edit.isEnabled() and add.command_edit.isEnabled()
    assert add.config() == HostConfig("ssh://alice@gpu2",
                                      remote_command="~/venv/bin/vram-steward")
    add.url_edit.setText("http://gpu2:8080")
    assert add.token_edit.isEnabled() and not add.ca_edit.isEnabled()
    assert not add.command_edit.isEnabled()


def test_remove_takes_a_saved_host_out(dialog):
    d, changed = dialog
    d.select("gpu1:8443")
    d.remove_button.click()
    assert changed == [()] and list(d.rows) == ["gpu2"]


def test_the_views_come_from_the_latest_snapshot(dialog):
    d, _ = dialog
    d.set_views([HostView("gpu1:8443", SAVED.url, DISCONNECTED, 0.0, "stopped answering")])
    assert d.rows["gpu1:8443"].reason_label.text() == "stopped answering"
    assert d.rows["gpu1:8443"].policy_label.isHidden()
    assert d.rows["gpu2"].state_label.text() == "connecting…"


def test_a_policy_change_runs_on_a_worker_thread_and_shows_the_servers_answer(qtbot):
    asked = []

    def set_policy(key, **changes):
        asked.append((key, changes, threading.current_thread() is threading.main_thread()))
        if changes.get("enabled") is False:
            raise RemoteError("https://gpu1:8443: this server acts for every user of the "
                              "host (the system service): only root changes its policy",
                              "not_allowed")
        return RemotePolicy(True, changes.get("threshold", 0.9), 0.79, 600.0, 30.0,
                            may_change=True)

    view = HostView("gpu1:8443", SAVED.url, CONNECTED, 0.0, policy=POLICY)
    courier = PolicyCourier(set_policy)
    d = HostsDialog([SAVED], [], [view], courier=courier)
    qtbot.addWidget(d)
    form = d.policy_form
    assert form.enabled_box.isChecked() and form.threshold_spin.value() == 90
    assert not form.apply_button.isEnabled()  # nothing changed yet
    form.threshold_spin.setValue(80)
    form.idle_spin.setValue(10)
    form.apply_button.click()
    assert form.status.text() == "Asking gpu1:8443…" and not form.apply_button.isEnabled()
    qtbot.waitUntil(lambda: "now runs" in form.status.text(), timeout=5000)
    assert asked == [("gpu1:8443", {"threshold": 0.8, "min_idle_s": 600.0}, False)]
    assert form.status.text() == "gpu1:8443 now runs: Auto-unload on at 80 %, idle ≥ 10 min."
    form.enabled_box.setChecked(False)
    form.apply_button.click()
    qtbot.waitUntil(lambda: "Not changed" in form.status.text(), timeout=5000)
    assert "only root changes its policy" in form.status.text()


def test_a_policy_not_the_callers_to_change_is_shown_read_only(qtbot):
    theirs = RemotePolicy(False, 0.9, 0.85, 300.0, 30.0, may_change=False,
                          why_not="only root changes its pressure policy")
    d = HostsDialog([SAVED], [], [HostView("gpu1:8443", SAVED.url, CONNECTED, 0.0,
                                           policy=theirs)])
    qtbot.addWidget(d)
    form = d.policy_form
    assert not form.enabled_box.isEnabled() and not form.apply_button.isEnabled()
    assert "Not yours to change: only root" in form.note.text()
    assert d.rows["gpu1:8443"].policy_label.text() == "Auto-unload off (the server's)"
