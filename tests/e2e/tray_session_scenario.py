"""Runs inside ``dbus-run-session`` on an X server: the real app against a fake
notification server and a tray host that appears after the app started.

Prints one JSON line with what the "desktop" saw; tests/e2e/test_tray_session.py
asserts on it.  Usage: tray_session_scenario.py WORKDIR [SIGNAL]: with a signal
name (SIGTERM, SIGINT, SIGHUP), the app is sent it once its tray icon is up,
instead of choosing Quit in the tray's menu.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.fakes.notification_listener import NotificationListener  # noqa: E402
from tests.fakes.status_notifier_watcher import PanelView, StatusNotifierWatcher  # noqa: E402


def main() -> int:
    work = Path(sys.argv[1])
    sig = getattr(signal, sys.argv[2]) if len(sys.argv) > 2 else None
    settings = work / "settings.ini"
    # Alert at 70 %: the demo's first GPU is above that from the start.
    settings.write_text("[alerts]\nthreshold=0.7\nrearm=0.6\n")
    (work / "run").mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, QT_QPA_PLATFORM="xcb", VRAM_STEWARD_SETTINGS=str(settings),
               VRAM_STEWARD_INSTANCE=str(work / "run" / "gui.sock"))
    result: dict = {}
    with NotificationListener(capabilities=("actions", "body")) as notifications:
        app = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "--demo"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            result["notified"] = notifications.wait_for_notifications(1, timeout=60)
            if result["notified"]:
                n = notifications.notifications[0]
                result["notification"] = {k: n.get(k) for k in (
                    "signature", "app_name", "summary", "body", "actions", "hints")}
            started = time.monotonic()
            watcher = StatusNotifierWatcher().start()  # a tray host appears
            item = watcher.wait_for_item(timeout=20)
            result["tray_after_s"] = round(time.monotonic() - started, 1) if item else None
            if item:
                panel = PanelView(item)
                deadline = time.monotonic() + 10
                tooltip = panel.prop("ToolTip")
                while "GPU" not in json.dumps(tooltip) and time.monotonic() < deadline:
                    time.sleep(0.2)  # the first update arrives with the next snapshot
                    tooltip = panel.prop("ToolTip")
                result["tooltip"] = [tooltip[2], tooltip[3]]
                result["icon_sizes"] = [[w, h] for w, h, _data in panel.prop("IconPixmap")]
                result["menu"] = [[label, enabled] for _id, label, enabled in
                                  panel.menu_labels()]
                asked = time.monotonic()
                if sig is None:
                    quit_id = next(i for i, label, _e in panel.menu_labels()
                                   if label == "Quit")
                    panel.click(quit_id)
                else:  # once: a tray must not turn it into "hide the window"
                    app.send_signal(sig)
                try:
                    result["exit_code"] = app.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    result["exit_code"] = None
                result["exit_after_s"] = round(time.monotonic() - asked, 1)
                panel.close()
            watcher.stop()
        finally:
            if app.poll() is None:
                app.kill()
            _out, err = app.communicate(timeout=20)
            result["stderr_tail"] = err[-1500:]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
