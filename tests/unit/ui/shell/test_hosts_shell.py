"""Hosts… in the running app: the dialog opened from the window's button on
the latest snapshot's hosts; a host added is saved and watched at once, a
bad one changes nothing; hosts given for this run are watched, never saved."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent

from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.hosts import CONNECTED, HostView
from app.core.monitor.samples import Snapshot
from app.core.remote.host_config import HostConfig
from app.core.remote.policy import RemotePolicy
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import UiSettings
from app.ui.shell.desktop import DesktopShell
from app.ui.window.main_window import MainWindow

SAVED = HostConfig("https://gpu1:8443")
GIVEN = HostConfig("ssh://alice@gpu2")


class FakeFleet:
    def __init__(self):
        self.watched = []
        self.policies = []
        self.gate = threading.Event()
        self.gate.set()

    def set_hosts(self, configs):
        self.watched.append(list(configs))

    def set_policy(self, key, **changes):
        self.policies.append((key, changes))
        self.gate.wait(5)
        return RemotePolicy(True, changes.get("threshold", 0.9), 0.79, 300.0, 30.0,
                            may_change=True)


class FakeSampler:
    def __init__(self):
        self.fleet = FakeFleet()

    def set_period(self, s):
        pass


@pytest.fixture
def parts(qtbot, qapp, tmp_path):
    window = MainWindow(History(HistoryConfig()), settings=UiSettings(hosts=(SAVED,)))
    qtbot.addWidget(window)
    window.cli_hosts = (GIVEN,)
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    sampler = FakeSampler()
    shell = DesktopShell(qapp, window, sampler, store, None, None, None)
    yield shell, window, store, sampler.fleet
    if shell.hosts.dialog is not None:
        shell.hosts.dialog.close()


def test_the_windows_button_opens_the_dialog_on_the_latest_hosts(parts):
    shell, window, _store, _fleet = parts
    view = HostView("gpu1:8443", SAVED.url, CONNECTED, 0.0, user="alice")
    shell.on_snapshot(Snapshot(1.0, 1.0, "nvml", None, (), hosts=(view,)))
    window.hosts_requested.emit()
    dialog = shell.hosts.dialog
    assert dialog is not None and dialog.isVisible()
    assert [(e.key, e.tag, e.connected) for e in dialog.entries()] == [
        ("gpu1:8443", "saved", True), ("gpu2", "for this run", False)]
    window.hosts_requested.emit()
    assert shell.hosts.dialog is dialog  # raised, not a second one


def test_a_host_added_is_saved_and_watched_at_once(parts):
    shell, window, store, fleet = parts
    dialog = shell.hosts.open()
    assert dialog.add_host(HostConfig("ssh://bob@gpu3")) is None
    mine = (SAVED, HostConfig("ssh://bob@gpu3"))
    assert window.settings.hosts == mine
    assert store.load().hosts == mine  # written; the --host one is not
    assert fleet.watched == [[*mine, GIVEN]]
    dialog.select("gpu1:8443")
    dialog.remove_button.click()
    assert store.load().hosts == (HostConfig("ssh://bob@gpu3"),)
    assert fleet.watched[-1] == [HostConfig("ssh://bob@gpu3"), GIVEN]


def test_a_bad_host_changes_nothing(parts, tmp_path):
    shell, window, store, fleet = parts
    dialog = shell.hosts.open()
    assert "expected ssh://" in dialog.add_host(HostConfig("gpu3"))
    token = tmp_path / "token"
    token.write_text("k" * 24)
    token.chmod(0o640)
    assert "others may read it" in dialog.add_host(
        HostConfig("https://gpu3:8443", token_file=str(token)))
    assert window.settings.hosts == (SAVED,) and fleet.watched == []
    assert store.load().hosts == ()  # nothing written


def test_a_dialog_closed_while_its_policy_change_is_in_flight_is_not_told(parts, qtbot,
                                                                         caplog):
    shell, _window, _store, fleet = parts
    policy = RemotePolicy(True, 0.9, 0.85, 300.0, 30.0, may_change=True)
    shell.on_snapshot(Snapshot(1.0, 1.0, "nvml", None, (), hosts=(
        HostView("gpu1:8443", SAVED.url, CONNECTED, 0.0, policy=policy),)))
    dialog = shell.hosts.open()
    fleet.gate.clear()  # the server's answer waits
    dialog.policy_form.threshold_spin.setValue(80)
    dialog.policy_form.apply_button.click()
    qtbot.waitUntil(lambda: fleet.policies == [("gpu1:8443", {"threshold": 0.8})])
    caplog.set_level(logging.DEBUG)
    dialog.close()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert shell.hosts.dialog is None and not shiboken6.isValid(dialog)
    fleet.gate.set()
    shell.hosts.courier.threads[-1].join(5)
    qtbot.wait(50)  # the answer is delivered to nobody
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    # A dialog opened afterwards changes the policy as before.
    dialog = shell.hosts.open()
    dialog.policy_form.threshold_spin.setValue(70)
    dialog.policy_form.apply_button.click()
    qtbot.waitUntil(lambda: "now runs" in dialog.policy_form.status.text(), timeout=5000)
    assert dialog.policy_form.status.text().endswith("Auto-unload on at 70 %, idle ≥ 5 min.")


def test_settings_restored_to_defaults_keep_the_hosts(parts):
    shell, window, _store, fleet = parts
    dialog = shell.make_dialog()
    dialog.buttons.button(dialog.buttons.StandardButton.RestoreDefaults).click()
    assert dialog.settings().hosts == (SAVED,)
    shell.apply_settings(dataclasses.replace(dialog.settings(), hosts=()))
    assert fleet.watched == [[GIVEN]]
