"""Hosts… in the running app: the dialog opened from the window's button on
the latest snapshot's hosts; a host added is saved and watched at once, a
bad one changes nothing; hosts given for this run are watched, never saved."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.hosts import CONNECTED, HostView
from app.core.monitor.samples import Snapshot
from app.core.remote.host_config import HostConfig
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

    def set_hosts(self, configs):
        self.watched.append(list(configs))

    def set_policy(self, key, **changes):
        self.policies.append((key, changes))


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


def test_settings_restored_to_defaults_keep_the_hosts(parts):
    shell, window, _store, fleet = parts
    dialog = shell.make_dialog()
    dialog.buttons.button(dialog.buttons.StandardButton.RestoreDefaults).click()
    assert dialog.settings().hosts == (SAVED,)
    shell.apply_settings(dataclasses.replace(dialog.settings(), hosts=()))
    assert fleet.watched == [[GIVEN]]
