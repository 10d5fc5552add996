"""The first automatic unload of a run is told of: "Reload now" and "Turn off
auto-unload", over D-Bus or on the window's banner; later ones are not."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.agents.events import DecisionUpdate
from app.core.control.requests import Reload, SetAutoUnload
from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.samples import ProcessSample
from app.core.policies.pressure import PolicyRunner
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import UiSettings
from app.ui.shell.desktop import DesktopShell
from app.ui.window.main_window import MainWindow
from tests.unit.core.policies.test_pressure import Directory, gpu, model, report, snap, watched
from tests.unit.ui.shell.test_desktop import NO_TRAY_GNOME, NOTHING, FakeAutostart, FakeDbus

GiB = 1024**3


@pytest.fixture
def parts(qtbot, qapp, tmp_path):
    window = MainWindow(History(HistoryConfig()), settings=UiSettings())
    qtbot.addWidget(window)
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    dbus = FakeDbus()
    shell = DesktopShell(qapp, window, None, store, None, dbus, FakeAutostart())
    sent = []
    window.controller.submit = lambda request: sent.append(request)  # what the shell sends
    yield shell, window, dbus, store, sent
    qapp.setQuitOnLastWindowClosed(True)


def decided(*models):
    """A done automatic unload of ``models`` in process 20 (the agent's answers: each
    moved its 1 GiB, the first one's release also held 100 MiB of earlier cache)."""
    r = report(20, *models)
    runner = watched(PolicyRunner(Directory(), synchronous=True), r)
    [d] = runner.observe(snap(gpu(fraction=0.95), r))
    [done] = runner.decisions()
    assert done.done and done.seq == d.seq
    return r, done


def with_decision(r, d, new=True):
    job = ProcessSample(20, 9 * GiB, name="python", command="python job20.py")
    g = dataclasses.replace(gpu(fraction=0.95), processes=(job,))
    return dataclasses.replace(snap(g, r), policy_decisions=(DecisionUpdate(d, new),))


def test_the_first_automatic_unload_notifies_with_reload_and_turn_off(parts):
    shell, window, dbus, store, sent = parts
    shell.start(answers=NO_TRAY_GNOME)
    r, d = decided(model("a", idle_s=3600, gib=10))
    shell.on_snapshot(with_decision(r, d))
    [(title, body, actions)] = [c for c in dbus.calls if c[0].startswith("Auto-unload")]
    # Freed: the model's own share of the allocator's release (1 GiB), not more.
    assert title == "Auto-unload freed 1.0 GiB from name-a in job20.py (20)"
    assert body.startswith("GPU 0 reached 95 % (the threshold is 90 %). It had been idle for "
                           "1 h 00 min and went to host memory")
    assert actions[:2] == [("reload", "Reload now"), ("auto-unload-off", "Turn off auto-unload")]
    nid = len(dbus.calls)
    # "Reload now": the typed request for that model, through the controller.
    dbus.action_invoked.emit(nid, "reload")
    assert sent == [Reload(20, "a", "name-a", "cuda:0")]
    # "Turn off auto-unload": as the control does it, and saved.
    assert window.settings.auto_unload.enabled
    dbus.action_invoked.emit(nid, "auto-unload-off")
    assert not window.settings.auto_unload.enabled
    assert window.auto_unload.text() == "Auto-unload: off"
    assert isinstance(sent[-1], SetAutoUnload) and sent[-1].enabled is False
    assert store.load().auto_unload.enabled is False
    # Once per run: the next automatic unload is in the Activity log only.
    r2, d2 = decided(model("b", idle_s=3600, gib=10))
    shell.on_snapshot(with_decision(r2, dataclasses.replace(d2, seq=d2.seq + 1)))
    assert len([c for c in dbus.calls if c[0].startswith("Auto-unload")]) == 1


def test_nothing_is_told_before_an_unload_went_through(parts):
    shell, _window, dbus, _store, _sent = parts
    shell.start(answers=NO_TRAY_GNOME)
    r, d = decided(model("a", gib=10))
    made = dataclasses.replace(d, done=False, results=())
    shell.on_snapshot(with_decision(r, made))  # decided, not done yet
    refused = dataclasses.replace(d, results=tuple(
        dataclasses.replace(x, ok=False, error="forward running", code="refused")
        for x in d.results))
    shell.on_snapshot(with_decision(r, refused, new=False))  # done, nothing unloaded
    assert not [c for c in dbus.calls if c[0].startswith("Auto-unload")]
    assert not shell.auto_unload_noticed


def test_without_notification_actions_the_banner_offers_them(parts):
    shell, window, _dbus, store, sent = parts
    shell.start(answers=NOTHING)
    r, d = decided(model("a", idle_s=3600, gib=10))
    shell.on_snapshot(with_decision(r, d))
    banner = window.alert_banner
    assert not banner.isHidden()
    assert banner.title.text().startswith("Auto-unload freed 1.0 GiB from name-a")
    assert banner.action_labels() == ["Reload now", "Turn off auto-unload"]
    buttons = {b.text(): b for b in banner._action_buttons}
    buttons["Reload now"].click()
    assert sent == [Reload(20, "a", "name-a", "cuda:0")] and banner.isHidden()
    shell.on_snapshot(with_decision(r, d, new=False))  # shown once
    assert banner.isHidden()
    shell._on_notice_action("auto-unload", "auto-unload-off")
    assert store.load().auto_unload.enabled is False
