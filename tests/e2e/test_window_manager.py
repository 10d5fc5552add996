"""The real app on a real X server with a real window manager and tray.

Xvfb at a laptop's screen size, openbox managing windows and trayer as the
panel (a system tray that takes a strip of the screen): the window the app
opens fits the work area (its frame, title bar and status bar included),
closing it hides it to the tray, one signal ends the app with its history
flushed, and the next start comes back where the window was left, moved onto
the screen if it was not.  Skipped with the reason where a tool is missing
(Debian: xvfb openbox trayer xdotool x11-utils wmctrl).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes import nvml_abi
from tests.fakes.processes import wait_for
from tests.fakes.xvfb import start_xvfb

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("Xvfb", "openbox", "trayer", "xdotool", "xprop", "wmctrl")
TRAY_PX = 24  # trayer's height: the strip the work area loses

for _tool in TOOLS:
    if shutil.which(_tool) is None:
        pytest.skip(f"{_tool} not installed (Debian: xvfb openbox trayer xdotool x11-utils "
                    "wmctrl)", allow_module_level=True)
if nvml_abi.unavailable_reason():
    pytest.skip(nvml_abi.unavailable_reason(), allow_module_level=True)


@dataclass
class Desktop:
    display: str
    width: int
    height: int

    def env(self) -> dict[str, str]:
        return dict(os.environ, DISPLAY=self.display)

    def x(self, *args: str) -> str:
        return subprocess.run(args, env=self.env(), capture_output=True, text=True,
                              timeout=20).stdout

    def workarea(self) -> tuple[int, int, int, int] | None:
        found = re.search(r"_NET_WORKAREA\(CARDINAL\) = (\d+), (\d+), (\d+), (\d+)",
                          self.x("xprop", "-root", "_NET_WORKAREA"))
        return tuple(int(v) for v in found.groups()) if found else None  # type: ignore[return-value]


@pytest.fixture(params=["1366x768", "1280x800"])
def desktop(request, tmp_path_factory) -> Iterator[Desktop]:
    width, height = (int(v) for v in request.param.split("x"))
    started = start_xvfb(request.param)
    if started is None:
        pytest.skip("Xvfb did not start")
    xvfb, display = started
    desk = Desktop(display, width, height)
    env = desk.env()
    env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=/nonexistent"  # the tray is trayer's (XEmbed)
    parts: list[subprocess.Popen] = []
    wm_log = tmp_path_factory.mktemp("openbox") / "stderr"
    try:
        for _attempt in range(3):  # a window manager that missed the new server: again
            if parts:
                parts.pop().kill()
            with open(wm_log, "wb") as err:
                parts.append(subprocess.Popen(["openbox", "--sm-disable"], env=env,
                                              stdout=subprocess.DEVNULL, stderr=err))
            deadline = time.monotonic() + 10
            while not _wm_up(desk) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _wm_up(desk):
                break
        else:
            pytest.fail(f"openbox never managed the screen (exit {parts[-1].poll()}: "
                        f"{wm_log.read_text(errors='replace')[-500:]})")
        for attempt in range(3):  # a panel started in the WM's first moments can go unseen
            if attempt:
                parts.pop().terminate()
            parts.append(subprocess.Popen(
                ["trayer", "--edge", "bottom", "--align", "right", "--SetDockType", "true",
                 "--SetPartialStrut", "true", "--widthtype", "pixel", "--width", "200",
                 "--heighttype", "pixel", "--height", str(TRAY_PX)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 5
            while desk.workarea() != (0, 0, width, height - TRAY_PX) and (
                    time.monotonic() < deadline):
                time.sleep(0.1)
            if desk.workarea() == (0, 0, width, height - TRAY_PX):
                break
        else:
            pytest.fail(f"trayer's strip never left the work area ({desk.workarea()})")
        yield desk
    finally:
        for part in reversed(parts):
            part.terminate()
            part.wait(timeout=10)
        xvfb.terminate()
        xvfb.wait(timeout=10)


def _wm_up(desk: Desktop) -> bool:
    return "_NET_SUPPORTING_WM_CHECK(WINDOW)" in desk.x("xprop", "-root",
                                                       "_NET_SUPPORTING_WM_CHECK")


@dataclass
class Frame:
    """The window as the window manager framed it (root coordinates)."""

    x: int
    y: int
    width: int
    height: int
    client_height: int

    def inside(self, area: tuple[int, int, int, int]) -> bool:
        ax, ay, aw, ah = area
        return (self.x >= ax and self.y >= ay and self.x + self.width <= ax + aw
                and self.y + self.height <= ay + ah)


class App:
    """``main.py`` on the ABI fake of libnvidia-ml, with its own settings,
    state folder and instance socket under ``work``."""

    def __init__(self, desk: Desktop, work: Path, fake_env: dict[str, str]) -> None:
        self.desk = desk
        self.work = work
        env = dict(fake_env, DISPLAY=desk.display, QT_QPA_PLATFORM="xcb",
                   DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent",
                   VRAM_STEWARD_SETTINGS=str(work / "settings.ini"),
                   VRAM_STEWARD_INSTANCE=str(work / "run" / "gui.sock"),
                   VRAM_STEWARD_STATE_DIR=str(work / "state"))
        for folder in ("run", "state"):
            (work / folder).mkdir(mode=0o700, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "main.py", "--period", "0.25"], cwd=ROOT,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.window = wait_for("the app's window", self._find, 60, 0.1).split()[0]

    def _find(self) -> str:
        if self.proc.poll() is not None:
            pytest.fail(f"the app ended ({self.proc.returncode}): {self.proc.stderr.read()}")
        return self.desk.x("xdotool", "search", "--onlyvisible", "--name", "^VRAM Steward").strip()

    def frame(self) -> Frame | None:
        # xwininfo's absolute corner (xdotool's adds the frame's top once more)
        info = self.desk.x("xwininfo", "-id", self.window)
        geo = {key: int(value) for key, value in re.findall(
            r"(Absolute upper-left X|Absolute upper-left Y|Width|Height):\s+(-?\d+)", info)}
        ext = re.search(r"= (\d+), (\d+), (\d+), (\d+)",
                        self.desk.x("xprop", "-id", self.window, "_NET_FRAME_EXTENTS"))
        if len(geo) < 4 or ext is None:
            return None
        left, right, top, bottom = (int(v) for v in ext.groups())
        x, y = geo["Absolute upper-left X"], geo["Absolute upper-left Y"]
        w, h = geo["Width"], geo["Height"]
        return Frame(x - left, y - top, w + left + right, h + top + bottom, h)

    def settled_frame(self) -> Frame:
        """The frame once it stops moving (the app corrects it after the WM framed it)."""
        last: list[Frame | None] = [None]

        def steady() -> Frame | None:
            time.sleep(0.5)
            now = self.frame()
            same = now is not None and now == last[0]
            last[0] = now
            return now if same else None

        return wait_for("the window to settle", steady, 20, 0.1)

    def mapped(self) -> bool:
        return "IsViewable" in self.desk.x("xwininfo", "-id", self.window)

    def end(self, sig: signal.Signals) -> tuple[int | None, float, str]:
        asked = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - asked
        if self.proc.poll() is None:
            self.proc.kill()
        _out, err = self.proc.communicate(timeout=20)
        return code, took, err

    def stored_samples(self) -> int:
        with sqlite3.connect(self.work / "state" / "history.sqlite3") as db:
            return int(db.execute("SELECT COUNT(*) FROM sample").fetchone()[0])


@pytest.fixture
def fake_nvml(tmp_path) -> Iterator[dict[str, str]]:
    with nvml_abi.Helpers(2) as pids:
        fake = nvml_abi.server([pids[:1], pids[1:]], seed=5)
        config = fake.write(tmp_path / "nvml.conf")
        yield fake.env(nvml_abi.build("current"), config)


def test_the_window_fits_the_screen_hides_to_the_tray_and_one_signal_ends_it(
        desktop, fake_nvml, tmp_path):
    app = App(desktop, tmp_path, fake_nvml)
    try:
        frame = app.settled_frame()
        area = desktop.workarea()
        assert area is not None and frame.inside(area), (frame, area)
        # As tall as the work area allows (the preferred 860 px is more than these have).
        assert frame.height == area[3], (frame, area)

        # Closing the window with a tray keeps the app in the tray.
        desktop.x("wmctrl", "-i", "-c", app.window)
        wait_for("the window to hide", lambda: not app.mapped(), 10, 0.1)
        time.sleep(1.0)
        assert app.proc.poll() is None, "closing with a tray ended the app"

        sig = signal.SIGTERM if desktop.width == 1366 else signal.SIGHUP
        code, took, err = app.end(sig)
        assert code == 0 and took < 10, (code, took, err[-2000:])
        assert app.stored_samples() > 0  # the history was flushed on the way out
        saved = (tmp_path / "settings.ini").read_text()
        assert f"height={frame.client_height}" in saved, saved
    finally:
        if app.proc.poll() is None:
            app.proc.kill()


def test_the_next_start_comes_back_where_it_was_and_onto_the_screen(
        desktop, fake_nvml, tmp_path):
    # Left last on a bigger screen, beyond this one's right edge.
    (tmp_path / "settings.ini").write_text(
        "[window]\nx=1900\ny=300\nwidth=1800\nheight=1100\nmaximised=false\n")
    app = App(desktop, tmp_path, fake_nvml)
    try:
        frame = app.settled_frame()
        area = desktop.workarea()
        assert area is not None and frame.inside(area), (frame, area)
        # Moved and sized by hand, then ended with Ctrl+C: the next start restores it.
        desktop.x("xdotool", "windowsize", app.window, "900", "560")
        desktop.x("xdotool", "windowmove", app.window, "60", "40")
        moved = app.settled_frame()
        code, took, err = app.end(signal.SIGINT)
        assert code == 0 and took < 10, (code, took, err[-2000:])
    finally:
        if app.proc.poll() is None:
            app.proc.kill()
    again = App(desktop, tmp_path, fake_nvml)
    try:
        back = again.settled_frame()
        assert (back.x, back.y, back.width, back.height) == (
            moved.x, moved.y, moved.width, moved.height), (back, moved)
    finally:
        again.end(signal.SIGTERM)
