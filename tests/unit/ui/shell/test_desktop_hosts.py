"""Remote hosts on the desktop: the tray's fullest GPU is any host's with
current figures and its tooltip names the host; alerts name their host, keep
per-GPU levels by UUID, and a disconnected host's last figures raise none; a
host's OOM report is told once, naming the host."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.diagnosis.types import OomReport
from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView, qualify_gpu
from app.ui.settings.values import GpuAlertLevels
from app.ui.shell.desktop import alert_configs
from app.ui.shell.notifier import OPEN_REPORT_ACTION
from app.ui.shell.tray import TrayController, fullest
from tests.unit.ui.shell.test_desktop import NO_TRAY_GNOME, shell_parts  # noqa: F401

GiB = 1024**3


def at(gpu, level):
    return dataclasses.replace(gpu, memory_used=int(level * gpu.memory_total))


def host(key, local_snap, levels, state=CONNECTED, fresh=True, ooms=()):
    """A host ``key`` whose GPUs are ``local_snap``'s first ones at ``levels``."""
    gpus = tuple(qualify_gpu(dataclasses.replace(at(g, lvl), uuid=f"GPU-{key}-{i}"), key)
                 for i, (g, lvl) in enumerate(zip(local_snap.gpus, levels, strict=False)))
    theirs = dataclasses.replace(local_snap, gpus=gpus, agents={}, diagnoses=(),
                                 oom_reports=tuple(ooms), hosts=())
    return HostView(key, f"https://{key}:8443", state, 0.0, None, theirs, fresh=fresh)


def calm(snap, later=0.0, hosts=()):
    """``snap`` with every local GPU at 30 %, ``later`` seconds on, with ``hosts``."""
    return dataclasses.replace(snap, gpus=tuple(at(g, 0.3) for g in snap.gpus),
                               monotonic=snap.monotonic + later, hosts=tuple(hosts),
                               diagnoses=(), oom_reports=())


def test_the_tray_shows_the_fullest_gpu_of_any_live_host_and_names_it(qapp, demo_feed):
    snap = calm(demo_feed.snapshot())
    world = dataclasses.replace(snap, hosts=(host("gpu1", snap, [0.5, 0.91]),
                                             host("gpu2", snap, [0.99], DISCONNECTED)))
    state = fullest(world)
    assert state.fraction == pytest.approx(0.91, abs=0.01) and state.where == "gpu1 · GPU 1"
    tray = TrayController()
    tray.update(world)
    tip = tray.icon.toolTip().splitlines()
    assert tip[1] == "Fullest: gpu1 · GPU 1: 91 %"
    assert any(line.startswith("gpu1 · GPU 0 · ") for line in tip)
    assert any(line.startswith("gpu2 · disconnected since ") for line in tip)
    assert not any(line.startswith("gpu2 · GPU") for line in tip)  # stale figures: not now's
    assert tray.gpu_lines() == tip[2:]


def test_an_alert_for_a_remote_gpu_names_its_host(shell_parts, demo_feed):
    shell, window, dbus, _store, _ = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    snap = demo_feed.snapshot()
    shell.on_snapshot(calm(snap, 0, [host("gpu1", snap, [0.5])]))
    shell.on_snapshot(calm(snap, 1, [host("gpu1", snap, [0.95])]))
    (call,) = dbus.calls
    assert call[0] == "gpu1 · GPU 0 at 95 % of its memory"
    assert any(e.event == call[0] for e in window.activity.entries)


def test_a_disconnected_hosts_last_figures_raise_no_alert(shell_parts, demo_feed):
    shell, _window, dbus, _store, _ = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    snap = demo_feed.snapshot()
    for t in range(3):
        shell.on_snapshot(calm(snap, t, [host("gpu1", snap, [0.99], DISCONNECTED)]))
    assert dbus.calls == []


def test_per_gpu_levels_of_a_remote_gpu_follow_its_uuid(demo_feed):
    from app.ui.settings.values import AlertSettings

    snap = demo_feed.snapshot()
    world = calm(snap, 0, [host("gpu1", snap, [0.5])])
    settings = AlertSettings(per_gpu={"GPU-gpu1-0": GpuAlertLevels(0.6, 0.5)})
    _base, per_gpu = alert_configs(settings, world)
    assert per_gpu["0@gpu1"].threshold == 0.6


def test_a_remote_oom_report_is_told_once_naming_the_host(shell_parts, demo_feed):
    shell, _window, dbus, _store, _ = shell_parts
    shell.start(answers=NO_TRAY_GNOME)
    snap = demo_feed.snapshot()
    report = OomReport("1-42-1", 1.0, 42, "train.py", "0@gpu1", "GPU-gpu1-0", "A100",
                       80 * GiB, 79 * GiB, 2 * GiB, "live_tensors", ("It was full.",), (), (),
                       {})
    shell.on_snapshot(calm(snap, 0, [host("gpu1", snap, [0.5], ooms=[report])]))
    shell.on_snapshot(calm(snap, 1, [host("gpu1", snap, [0.5], fresh=False, ooms=[report])]))
    (call,) = dbus.calls
    assert call[0] == "gpu1 · train.py ran out of GPU memory asking for 2.0 GiB"
    assert (OPEN_REPORT_ACTION, "Open report") in call[2]
