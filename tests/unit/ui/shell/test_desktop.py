"""The desktop shell: alerts from snapshots, tray or no tray, closing, settings."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QObject, Signal

from app.core.monitor.history import History, HistoryConfig
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import GpuAlertLevels, UiSettings
from app.ui.shell.desktop import DesktopShell, alert_configs
from app.ui.shell.notifier import Channel, PlatformAnswers
from app.ui.window.main_window import MainWindow

GiB = 1024**3
NO_TRAY_GNOME = PlatformAnswers(tray=False, dbus=True, linux=True)
TRAY_LINUX = PlatformAnswers(tray=True, dbus=True, linux=True)
NOTHING = PlatformAnswers(tray=False, dbus=False, linux=True)


class FakeDbus(QObject):
    action_invoked = Signal(int, str)

    def __init__(self):
        super().__init__()
        self.calls = []

    def available(self):
        return True

    def notify(self, summary, body, actions=(), **kw):
        self.calls.append((summary, body, list(actions)))
        return len(self.calls)


class FakeAutostart:
    def __init__(self):
        self.enabled = False
        self.commands = []

    def is_supported(self):
        return True

    def is_enabled(self):
        return self.enabled

    def enable(self, command):
        self.enabled = True
        self.commands.append(command)

    def disable(self):
        self.enabled = False

    def location(self):
        return "/tmp/autostart/vram-steward.desktop"


class FakeSampler:
    def __init__(self):
        self.periods = []

    def set_period(self, s):
        self.periods.append(s)


@pytest.fixture
def shell_parts(qtbot, qapp, tmp_path, monkeypatch):
    monkeypatch.setattr(qapp, "quit", lambda: quits.append(1))
    quits: list[int] = []
    window = MainWindow(History(HistoryConfig()), settings=UiSettings())
    qtbot.addWidget(window)
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    dbus = FakeDbus()
    sampler = FakeSampler()
    shell = DesktopShell(qapp, window, sampler, store, None, dbus, FakeAutostart())
    yield shell, window, dbus, store, quits
    if shell.tray is not None:
        shell.tray.hide()
    qapp.setQuitOnLastWindowClosed(True)


def _feed(shell, feed, seconds: float, dt: float = 0.25):
    for _ in range(int(seconds / dt)):
        snap = feed.snapshot()
        shell.window.on_snapshot(snap)
        shell.on_snapshot(snap)
        feed.t[0] += dt


def test_demo_passing_90_percent_gives_one_notification(shell_parts, demo_feed):
    shell, window, dbus, _store, _ = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    assert shell.notifier.channel is Channel.DBUS
    _feed(shell, demo_feed, 120)  # the demo's training job crosses 90 % every 45 s
    memory = [c for c in dbus.calls if "of its memory" in c[0]]
    assert len(memory) == 1  # hysteresis + 5 min minimum interval: once
    summary, body, _actions = memory[0]
    assert summary.startswith("GPU 0 at ")
    assert "train.py (20417)" in body  # names the top processes
    assert any(e.event == summary for e in window.activity.entries)


def test_pause_silences_alerts_then_resume(shell_parts, demo_feed):
    shell, _window, dbus, _store, _ = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    shell.pause_alerts(True)
    _feed(shell, demo_feed, 60)
    assert dbus.calls == []
    shell.pause_alerts(False)
    _feed(shell, demo_feed, 60)
    assert len(dbus.calls) == 1


def test_notifications_off_means_no_alerts(shell_parts, demo_feed):
    shell, _window, dbus, _store, _ = shell_parts
    s = shell.settings.copy()
    s.alerts.notifications = False
    shell.apply_settings(s)
    shell.start(answers=NO_TRAY_GNOME)
    _feed(shell, demo_feed, 60)
    assert dbus.calls == []


def test_per_gpu_levels_follow_the_uuid(demo_feed):
    snap = demo_feed.snapshot()
    uuid = snap.gpus[1].uuid
    s = UiSettings().alerts
    s.per_gpu[uuid] = GpuAlertLevels(0.5, 0.4)
    base, per_gpu = alert_configs(s, snap)
    assert base.threshold == 0.9
    assert per_gpu == {snap.gpus[1].display_id: dataclasses.replace(base, threshold=0.5,
                                                                   rearm=0.4)}


def test_no_tray_closing_quits_and_hint_is_shown_once(shell_parts):
    shell, window, _dbus, store, quits = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    assert shell.tray is None
    assert not window.hint_banner.isHidden()
    assert "No system tray" in window.hint_banner.title.text()
    assert store.load().no_tray_hint_shown is True
    window.close()
    shell.app.processEvents()
    assert quits == [1]
    # The next start does not repeat the hint.
    again = MainWindow(History(HistoryConfig()), settings=store.load())
    DesktopShell(shell.app, again, None, store, None, FakeDbus()).start(answers=NO_TRAY_GNOME)
    assert again.hint_banner.isHidden()
    again.deleteLater()


def test_with_tray_closing_hides_and_tells_the_first_time(shell_parts, monkeypatch):
    shell, window, _dbus, store, quits = shell_parts
    shell.start(answers=TRAY_LINUX)
    assert shell.tray is not None and shell.tray.icon.isVisible()
    assert not shell.app.quitOnLastWindowClosed()
    messages = []
    monkeypatch.setattr(shell.tray, "message", lambda *a, **k: messages.append(a[0]))
    window.close()
    assert window.isHidden() and quits == []
    assert messages == ["VRAM Steward is still running"]
    assert store.load().close_hint_shown is True
    shell.show_window()
    assert window.isVisible()
    window.close()
    assert messages == ["VRAM Steward is still running"]  # only the first time
    shell.tray.quit_action.trigger()
    assert quits and shell.quitting


def test_close_to_tray_off_quits_even_with_a_tray(shell_parts):
    shell, window, _dbus, _store, quits = shell_parts
    shell.settings.close_to_tray = False
    shell.start(answers=TRAY_LINUX)
    window.close()
    shell.app.processEvents()
    assert quits == [1]


def test_tray_that_appears_later_is_picked_up(shell_parts, monkeypatch):
    import app.ui.shell.desktop as desktop_mod

    shell, window, _dbus, _store, _ = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    assert shell._tray_poll.isActive()
    monkeypatch.setattr(desktop_mod, "probe_platform", lambda _dbus: TRAY_LINUX)
    shell._poll_tray()  # what the poll timer runs
    assert shell.tray is not None and shell.tray.icon.isVisible()
    assert not shell._tray_poll.isActive()
    assert window.hint_banner.isHidden()
    assert window.activity.entries[0].event == "System tray found"


def test_nothing_available_alerts_go_to_the_banner(shell_parts, demo_feed):
    shell, window, _dbus, _store, _ = shell_parts
    shell.dbus = None
    shell.notifier.dbus = None
    shell.start(answers=NOTHING)
    assert shell.notifier.channel is Channel.BANNER
    _feed_until(shell, demo_feed, lambda snap: not window.alert_banner.isHidden())
    assert window.alert_banner.title.text().startswith("GPU 0 at ")


def _feed_until(shell, feed, done, seconds: float = 120, dt: float = 0.25):
    """Feed demo snapshots until ``done(snapshot)``; returns that snapshot."""
    for _ in range(int(seconds / dt)):
        snap = feed.snapshot()
        shell.window.on_snapshot(snap)
        shell.on_snapshot(snap)
        feed.t[0] += dt
        if done(snap):
            return snap
    raise AssertionError("the demo never got there")


def _at(snap, level, display_id="0", later=1.0):
    """``snap`` a little later with GPU ``display_id`` at ``level`` of its memory."""
    gpus = tuple(dataclasses.replace(g, memory_used=int(level * g.memory_total))
                 if g.display_id == display_id else g for g in snap.gpus)
    return dataclasses.replace(snap, gpus=gpus, monotonic=snap.monotonic + later)


def test_alert_banner_retracts_below_the_rearm_level(shell_parts, demo_feed):
    shell, window, _dbus, _store, _ = shell_parts
    shell.notifier.dbus = None
    shell.start(answers=NOTHING)
    banner = window.alert_banner
    snap = _feed_until(shell, demo_feed, lambda snap: not banner.isHidden())
    assert banner.alert is not None and banner.alert.display_id == "0"
    rearm = shell.policy.config_for("0").rearm
    # Below the alert level but not below the re-arm level: the banner stays.
    shell.on_snapshot(_at(snap, rearm + 0.02))
    assert not banner.isHidden()
    # The first snapshot below it takes the banner away.
    shell.on_snapshot(_at(snap, rearm - 0.02, later=2.0))
    assert banner.isHidden() and banner.alert is None


def test_alert_banner_retracts_when_its_gpu_goes(shell_parts, demo_feed):
    shell, window, _dbus, _store, _ = shell_parts
    shell.notifier.dbus = None
    shell.start(answers=NOTHING)
    banner = window.alert_banner
    snap = _feed_until(shell, demo_feed, lambda snap: not banner.isHidden())
    # The source failing says nothing about the GPU: the banner stays.
    shell.on_snapshot(dataclasses.replace(snap, gpus=(), error="driver gone"))
    assert not banner.isHidden()
    others = tuple(g for g in snap.gpus if g.display_id != "0")
    shell.on_snapshot(dataclasses.replace(snap, gpus=others))
    assert banner.isHidden()


def test_process_alerts_stay_on_the_banner(shell_parts, demo_feed):
    from app.core.policies.alerts import Alert

    shell, window, _dbus, _store, _ = shell_parts
    shell.notifier.dbus = None
    shell.start(answers=NOTHING)
    shell._alert(Alert("oom", "0", "train.py ran out of GPU memory", "...", pid=1, count=1))
    _feed(shell, demo_feed, 2)  # GPU 0 well below its re-arm level
    assert not window.alert_banner.isHidden()


def test_start_minimised(shell_parts):
    shell, window, *_ = shell_parts
    shell.start(minimised=True, answers=TRAY_LINUX)
    assert not window.isVisible()  # in the tray only
    shell2_window = MainWindow(History(HistoryConfig()))
    s = DesktopShell(shell.app, shell2_window, None, None, None, None)
    s.start(minimised=True, answers=NOTHING)
    assert shell2_window.isMinimized()  # no tray: minimised to the taskbar
    shell2_window.deleteLater()


def test_apply_settings_applies_live_and_saves(shell_parts):
    shell, window, _dbus, store, _ = shell_parts
    s = shell.settings.copy()
    s.sample_period_s = 1.0
    s.alerts.threshold = 0.7
    s.alerts.rearm = 0.6
    s.auto_unload.enabled = False
    shell.apply_settings(s, autostart=True)
    assert shell.sampler.periods == [1.0]
    assert shell.policy.config.threshold == 0.7
    assert window.settings.auto_unload.enabled is False
    assert shell.autostart.enabled and shell.autostart.commands[0][-1] == "--minimised"
    assert store.load() == s
    shell.apply_settings(s.copy(), autostart=False)
    assert not shell.autostart.enabled


def test_tray_menu_free_and_unload_reach_the_window(shell_parts, monkeypatch, demo_feed):
    shell, window, *_ = shell_parts
    shell.start(answers=TRAY_LINUX)
    from app.core.agents.demo import DemoAgents
    from app.core.control.requests import FreeCache, UnloadIdle

    demo_feed.collector.agents = DemoAgents(demo_feed.source)
    shell.on_snapshot(demo_feed.snapshot())  # agents, no model server
    calls = []
    sent = {FreeCache.everywhere(): "free",
            UnloadIdle(window.settings.auto_unload.min_idle_s): "unload"}
    monkeypatch.setattr(window.controller, "submit", lambda req: calls.append(sent[req]))
    shell.tray.free_all_requested.emit()
    shell.tray.unload_idle_requested.emit()
    assert calls == ["free", "unload"]


def test_free_all_frees_the_caches_and_unloads_each_server_model_not_generating(
        shell_parts, monkeypatch):
    from app.core.control.requests import FreeCache, Unload
    from tests.unit.ui.agents import servers as srv
    from tests.unit.ui.agents.test_agent_views import device, report

    shell, window, *_ = shell_parts
    shell.start(answers=TRAY_LINUX)
    snap = srv.snapshot(agents={srv.COMFY: report(srv.COMFY, device(1, 5 * GiB, 6 * GiB))})
    window.on_snapshot(snap)
    shell.on_snapshot(snap)
    shell._refresh_tray()
    assert shell.tray.free_action.text() == "Free all (1 process, 2 server models)"
    assert shell.tray.free_action.isEnabled()
    calls = []
    monkeypatch.setattr(window.controller, "submit", calls.append)
    shell.tray.free_action.trigger()
    o, c = srv.ollama(), srv.comfyui()
    # Not llama3.2 (generating), not A1111's checkpoint (on the CPU already), not llama.cpp
    # or vLLM (no unload).
    assert calls == [FreeCache.everywhere(),
                     Unload(srv.OLLAMA, "qwen2.5:7b", name="qwen2.5:7b",
                            size=o.models[0].vram_bytes),
                     Unload(srv.COMFY, "all", name="models loaded by ComfyUI",
                            size=c.models[0].vram_bytes)]


def test_free_all_skips_what_the_controller_refuses(shell_parts, qtbot):
    """A refused unload (here: no agent directory to act through) is skipped; the
    others are still sent."""
    from tests.unit.ui.agents import servers as srv

    shell, window, *_ = shell_parts
    shell.start(answers=TRAY_LINUX)
    snap = srv.snapshot(servers=(srv.ollama(busy_model=False), srv.llamacpp()))
    window.on_snapshot(snap)
    shell.on_snapshot(snap)
    shell._refresh_tray()
    assert shell.tray.free_action.text() == "Free all (2 server models)"
    refused = []
    window.controller.refused.connect(lambda req, exc: refused.append(req.model))
    shell.free_all()
    assert refused == ["qwen2.5:7b", "llama3.2:3b"]
    nothing = srv.snapshot(servers=(srv.llamacpp(),))
    shell.on_snapshot(nothing)
    shell._refresh_tray()
    assert shell.tray.free_action.text() == "Free all" and not shell.tray.free_action.isEnabled()


def test_tray_frees_caches_and_unloads_idle_models_of_the_demo_agents(shell_parts, qtbot):
    """The tray's two actions end to end, against the demo's simulated agents."""
    from app.core.agents.demo import DemoAgents
    from tests.unit.ui.agents.test_agent_views import with_runner
    from tests.unit.ui.conftest import DemoFeed

    shell, window, *_ = shell_parts
    feed = DemoFeed()
    feed.collector.agents = DemoAgents(feed.source)
    runner = with_runner(window, lambda: feed.collector.agents, settle_s=0.0)
    shell.start(answers=TRAY_LINUX)
    _feed(shell, feed, 5)
    snap = window.latest
    shell._refresh_tray()
    assert shell.tray.free_action.isEnabled() and shell.tray.unload_action.isEnabled()
    idle = {(pid, m.id) for pid, r in snap.agents.items() for m in r.models
            if m.state == "resident" and m.training is False and not m.pinned}

    shell.tray.free_action.trigger()
    qtbot.waitUntil(lambda: window.last_action is not None and window.last_action.done,
                    timeout=5000)
    action = window.last_action
    assert sorted(action.results) == sorted(snap.agents)  # every process with an agent
    assert all(r.ok for r in action.results.values())
    assert action.freed > 0

    finished = []
    runner.finished.connect(finished.append)
    shell.tray.unload_action.trigger()
    qtbot.waitUntil(lambda: bool(finished) and not runner.core.busy_models(), timeout=5000)
    _feed(shell, feed, 1)
    after = window.latest
    offloaded = {(pid, m.id) for pid, r in after.agents.items() for m in r.models
                 if m.state == "offloaded"}
    assert offloaded and offloaded <= idle


def test_the_tray_poll_stops_with_its_window(qapp, tmp_path):
    """A shell never pokes a window that is gone (a later tray find would)."""
    from PySide6.QtCore import QCoreApplication, QEvent

    window = MainWindow(History(HistoryConfig()), settings=UiSettings())
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    shell = DesktopShell(qapp, window, FakeSampler(), store, None, FakeDbus(), FakeAutostart())
    shell.start(answers=NO_TRAY_GNOME)
    assert shell._tray_poll.isActive()
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shell._tray_poll.isActive()
