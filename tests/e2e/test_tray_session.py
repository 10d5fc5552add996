"""The real app on a real X server and session bus, seen from the desktop's side.

A fake notification server and a fake tray host (StatusNotifierWatcher) speak
D-Bus to the unmodified app: the app starts with no tray, alerts over D-Bus,
notices the tray host when it appears, registers its icon, and its menu's Quit
ends it.  Needs Xvfb, dbus-run-session and Qt's xcb plugin (libxcb-cursor0);
skipped with the reason when the machine lacks one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.xvfb import start_xvfb

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "e2e" / "tray_session_scenario.py"

pytest.importorskip("jeepney")
for tool in ("Xvfb", "dbus-run-session"):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed (Debian: xvfb, dbus)", allow_module_level=True)


@pytest.fixture(scope="module")
def display():
    started = start_xvfb("1280x1024")
    if started is None:
        pytest.skip("Xvfb did not start")
    server, display = started
    probe = subprocess.run(
        [sys.executable, "-c", "from PySide6.QtWidgets import QApplication; QApplication([])"],
        env=dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb"),
        capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        server.kill()
        pytest.skip("Qt's xcb plugin does not load (Debian: libxcb-cursor0): "
                    + probe.stderr.strip().splitlines()[-1][:200])
    yield display
    server.terminate()
    server.wait(timeout=10)


def test_alert_tray_that_appears_later_and_quit_from_its_menu(display, tmp_path):
    env = dict(os.environ, DISPLAY=display)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    done = subprocess.run(["dbus-run-session", "--", sys.executable, str(SCENARIO),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    # One alert, over D-Bus, in the exact wire format desktops accept.
    assert result["notified"], result["stderr_tail"]
    n = result["notification"]
    assert n["signature"] == "susssasa{sv}i"
    assert n["app_name"] == "VRAM Steward"
    assert n["summary"].startswith("GPU 0 at ")
    assert "train.py (20417)" in n["body"] and "Free cache could release" in n["body"]
    assert n["actions"][:2] == ["free", "Free caches"]
    assert n["hints"]["desktop-entry"] == ["s", "vram-steward"]

    # The tray host appeared after start-up; the app found it within its 5 s poll.
    assert result["tray_after_s"] is not None and result["tray_after_s"] <= 12
    title = result["tooltip"][0]
    assert title.startswith("VRAM Steward\nGPU 0 · RTX 4090 (demo) · ")
    assert [16, 16] in result["icon_sizes"] and [64, 64] in result["icon_sizes"]
    labels = [label for label, _enabled in result["menu"]]
    # A line per GPU, information only (the figures move on between two reads).
    assert labels[0].startswith("GPU 0 · RTX 4090 (demo) · ")
    assert labels[1].startswith("GPU 1 · A100-SXM4-80GB (demo) · ")
    assert [enabled for _l, enabled in result["menu"][:2]] == [False, False]
    # The demo's three processes with agents can be freed; its idle eval-mode models unloaded.
    assert labels[2] == "Free all (3 processes)" and result["menu"][2][1] is True
    assert labels[3].startswith("Unload idle models")
    assert labels[4:] == ["Show window", "Settings…", "Pause alerts for 1 h", "Quit"]
    assert result["exit_code"] == 0  # Quit from the tray menu ends the app cleanly


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_one_signal_ends_the_app_even_with_a_tray(display, tmp_path, name):
    env = dict(os.environ, DISPLAY=display)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    done = subprocess.run(["dbus-run-session", "--", sys.executable, str(SCENARIO),
                           str(tmp_path), name], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["tray_after_s"] is not None, seen  # the tray icon was up when it came
    assert seen["exit_code"] == 0, seen
    assert seen["exit_after_s"] < 10, seen
