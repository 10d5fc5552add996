"""The tray icon: drawn from the fullest GPU, tooltip and menu from every GPU."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtGui import QColor

from app.core.monitor.samples import DeviceState
from app.ui.shell.tray import TrayController, TrayState, fullest, gpu_line, render_ring
from app.ui.style import palette as pal

GiB = 1024**3


def _close(color: QColor, hex_color: str, tol: int = 40) -> bool:
    want = QColor(hex_color)
    return (abs(color.red() - want.red()) + abs(color.green() - want.green())
            + abs(color.blue() - want.blue())) <= tol and color.alpha() > 200


def test_ring_arc_follows_fraction_and_level_colour(qapp):
    img = render_ring(TrayState(0.25, pal.LEVEL_NORMAL), 64)
    top, left, bottom = img.pixelColor(32, 5), img.pixelColor(5, 32), img.pixelColor(32, 59)
    assert _close(top, pal.LEVEL_COLORS[pal.LEVEL_NORMAL])  # the arc starts at 12 o'clock
    assert not _close(left, pal.LEVEL_COLORS[pal.LEVEL_NORMAL])  # a quarter does not reach 9
    assert left.alpha() < 200 and bottom.alpha() < 200  # track only: translucent grey
    assert img.pixelColor(32, 32).alpha() == 0  # hollow below critical


def test_ring_critical_is_full_vermillion_with_a_centre_dot(qapp):
    img = render_ring(TrayState(0.97, pal.LEVEL_CRITICAL), 32)
    red = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
    assert _close(img.pixelColor(3, 16), red)  # 9 o'clock: 97 % of the way round
    assert _close(img.pixelColor(16, 16), red)


def test_ring_unknown_draws_no_arc(qapp):
    img = render_ring(TrayState(None, pal.LEVEL_UNKNOWN), 32)
    assert all(img.pixelColor(x, y).alpha() < 200 for x in range(32) for y in range(32))


def test_fullest_picks_the_highest_known_gpu(demo_feed):
    snap = demo_feed.snapshot()
    state = fullest(snap)
    fractions = [g.memory_fraction for g in snap.gpus]
    assert state.fraction == max(fractions)
    assert state.level == pal.level_for(max(fractions))
    lost = dataclasses.replace(snap, gpus=tuple(
        dataclasses.replace(g, state=DeviceState.LOST) for g in snap.gpus))
    assert fullest(lost) == TrayState(None, pal.LEVEL_UNKNOWN)
    assert fullest(None).fraction is None


def test_gpu_line_text(demo_feed):
    gpu = demo_feed.snapshot().gpus[0]
    g = dataclasses.replace(gpu, memory_used=int(21.3 * GiB), memory_total=24 * GiB)
    assert gpu_line(g) == "GPU 0 · RTX 4090 (demo) · 21.3 GiB / 24.0 GiB (89 %)"
    assert gpu_line(dataclasses.replace(g, memory_used=None)).endswith("memory n/a")
    assert gpu_line(dataclasses.replace(g, state=DeviceState.LOST)).endswith("· lost")


def test_tooltip_and_menu_list_every_gpu_and_follow_changes(qapp, demo_feed):
    tray = TrayController()
    snap = demo_feed.snapshot()
    tray.update(snap)
    tip = tray.icon.toolTip().splitlines()
    assert tip[0] == "VRAM Steward"
    assert tip[1:] == [gpu_line(g) for g in snap.gpus]
    assert tray.gpu_lines() == tip[1:]
    texts = [a.text() for a in tray.menu.actions() if a.text()]
    assert texts[len(snap.gpus):] == ["Free all", "Unload idle models", "Show window",
                                      "Pause alerts for 1 h", "Quit"]
    assert not any(a.isEnabled() for a in list(tray.menu.actions())[:len(snap.gpus)])
    one = dataclasses.replace(snap, gpus=snap.gpus[:1])
    tray.update(one)
    assert tray.gpu_lines() == [gpu_line(snap.gpus[0])]


def test_icon_is_redrawn_only_when_the_percent_or_level_changes(qapp, demo_feed, monkeypatch):
    import app.ui.shell.tray as tray_mod

    drawn = []
    real = tray_mod.tray_icon
    monkeypatch.setattr(tray_mod, "tray_icon", lambda s: (drawn.append(s), real(s))[1])
    tray = TrayController()
    snap = demo_feed.snapshot()
    tray.update(snap)
    tray.update(snap)
    g = snap.gpus[0]
    tray.update(dataclasses.replace(snap, gpus=(dataclasses.replace(
        g, memory_used=int(g.memory_total * 0.99)),) + snap.gpus[1:]))
    assert [s.percent for s in drawn][-2:] == [fullest(snap).percent, 99]
    assert len(drawn) == 3  # the constructor's "unknown", then two changes


def test_menu_actions_emit_their_signals(qtbot):
    tray = TrayController()
    tray.set_agent_actions(2, 1)
    for action, signal in ((tray.free_action, tray.free_all_requested),
                           (tray.unload_action, tray.unload_idle_requested),
                           (tray.show_action, tray.show_window_requested),
                           (tray.quit_action, tray.quit_requested)):
        with qtbot.waitSignal(signal, timeout=1000):
            action.trigger()
    with qtbot.waitSignal(tray.pause_alerts_requested, timeout=1000) as blocker:
        tray.pause_action.trigger()
    assert blocker.args == [True]
    assert tray.free_action.text() == "Free all (2 processes)"
    assert tray.unload_action.text() == "Unload idle models (1)"


@pytest.mark.parametrize("processes,models,text", [
    (1, 0, "Free all (1 process)"), (2, 3, "Free all (2 processes, 3 server models)"),
    (0, 1, "Free all (1 server model)"), (0, 0, "Free all")])
def test_free_all_counts_what_it_will_do_and_is_enabled_only_then(qapp, processes, models, text):
    tray = TrayController()
    tray.set_agent_actions(processes, 0, models)
    assert tray.free_action.text() == text
    assert tray.free_action.isEnabled() is bool(processes or models)
    assert "model server" in tray.free_action.toolTip()


def test_actions_disabled_when_there_is_nothing_to_do(qapp):
    tray = TrayController()
    tray.set_agent_actions(0, 0)
    assert not tray.free_action.isEnabled() and not tray.unload_action.isEnabled()


@pytest.mark.parametrize("reason,emits", [("Trigger", True), ("DoubleClick", True),
                                          ("Context", False)])
def test_clicking_the_icon_shows_the_window(qtbot, reason, emits):
    from PySide6.QtWidgets import QSystemTrayIcon

    tray = TrayController()
    got = []
    tray.show_window_requested.connect(lambda: got.append(1))
    tray.icon.activated.emit(getattr(QSystemTrayIcon.ActivationReason, reason))
    assert bool(got) is emits
