"""The real app in real processes: one instance, settings on disk, themed screenshots."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(QT_QPA_PLATFORM="offscreen",
               VRAM_STEWARD_SETTINGS=str(tmp_path / "settings.ini"),
               VRAM_STEWARD_INSTANCE=str(tmp_path / "run" / "gui.sock"),
               # No notification server: the session bus of the machine is not ours.
               DBUS_SESSION_BUS_ADDRESS=f"unix:path={tmp_path / 'no-bus'}")
    (tmp_path / "run").mkdir(mode=0o700, exist_ok=True)
    return env


def _wait_for(predicate, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"app exited early ({proc.returncode}): {err[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        time.sleep(0.05)


def test_second_launch_raises_the_first_and_settings_reach_the_disk(tmp_path):
    env = _env(tmp_path)
    settings = tmp_path / "settings.ini"
    first = subprocess.Popen([sys.executable, "main.py", "--demo"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Offscreen there is no tray: the first start says so once and remembers it.
        _wait_for(lambda: settings.exists() and "no_tray_hint_shown=true" in settings.read_text(),
                  60, first)
        second = subprocess.run([sys.executable, "main.py", "--demo"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert "already running; its window was raised" in second.stdout
        assert first.poll() is None  # the first one is still running
    finally:
        first.terminate()
        first.communicate(timeout=30)


@pytest.mark.parametrize("theme,dark", [("dark", True), ("light", False)])
def test_screenshot_in_each_theme(tmp_path, theme, dark):
    png = tmp_path / f"{theme}.png"
    done = subprocess.run([sys.executable, "main.py", "--demo", "--theme", theme,
                           "--screenshot", str(png), "--after", "0.8"], cwd=ROOT,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from PySide6.QtGui import QImage

    image = QImage(str(png))
    corner = image.pixelColor(4, image.height() // 2)  # window background beside the panels
    assert (corner.lightness() < 100) is dark
    assert not (tmp_path / "settings.ini").exists()  # a screenshot never writes settings
    shots = os.environ.get("VRAM_STEWARD_SHOTS")
    if shots:
        image.save(os.path.join(shots, f"window-{theme}.png"))


def test_app_on_the_nvml_fake_samples_and_ends_cleanly_on_sigterm(tmp_path):
    """The whole app on NVML through the real bindings (the ABI fake): it samples at
    its period, and SIGTERM (logout, ``kill``) ends it like Quit: NVML shut down."""
    from tests.fakes import nvml_abi

    reason = nvml_abi.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with nvml_abi.Helpers(4) as pids:
        fake = nvml_abi.server([pids[:2], pids[2:]], seed=13)
        config = fake.write(tmp_path / "nvml.conf")
        counts = tmp_path / "counts"
        env = fake.env(nvml_abi.build("current"), config, counts=counts, base=_env(tmp_path))
        app = subprocess.Popen([sys.executable, "main.py", "--period", "0.25"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(4.0)
            assert app.poll() is None
            app.terminate()  # SIGTERM
            _, err = app.communicate(timeout=30)
        finally:
            if app.poll() is None:
                app.kill()
                app.communicate()
    assert app.returncode == 0, err[-2000:]
    calls = nvml_abi.read_counts(counts.read_text())
    assert calls["nvmlShutdown"] == 1
    assert calls["nvmlDeviceGetPowerUsage"] >= 2 * 8  # both GPUs, a few seconds at 4 Hz
