"""Settings survive a restart: written with QSettings, read back by a new process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from app.ui.settings import store as store_module
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import GpuAlertLevels, UiSettings

ROOT = Path(__file__).resolve().parents[4]


def _custom() -> UiSettings:
    s = UiSettings()
    s.theme = "dark"
    s.sample_period_s = 0.5
    s.history_s = 1800.0
    s.start_minimised = True
    s.close_hint_shown = True
    s.alerts.threshold = 0.8
    s.alerts.rearm = 0.75
    s.alerts.per_gpu["GPU-0f1e"] = GpuAlertLevels(0.95, 0.9)
    s.auto_unload.enabled = False
    s.auto_unload.min_idle_s = 600.0
    return s


def test_round_trip_in_process(qapp, tmp_path):
    path = tmp_path / "vram-steward.ini"
    assert SettingsStore(open_settings(str(path))).save(_custom())
    assert SettingsStore(open_settings(str(path))).load() == _custom()


def test_file_is_readable_ini(qapp, tmp_path):
    path = tmp_path / "s.ini"
    SettingsStore(open_settings(str(path))).save(_custom())
    text = path.read_text()
    assert "theme=dark" in text
    assert "[alerts]" in text and "threshold=0.8" in text


def test_a_new_process_reads_what_this_one_wrote(qapp, tmp_path):
    path = tmp_path / "s.ini"
    SettingsStore(open_settings(str(path))).save(_custom())
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]);"
            "from app.ui.settings.store import SettingsStore;"
            "print(json.dumps(SettingsStore().load().to_dict()))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                         timeout=60, env={"VRAM_STEWARD_SETTINGS": str(path),
                                          "QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin"},
                         check=True)
    assert UiSettings.from_dict(json.loads(out.stdout)) == _custom()


def test_missing_file_gives_defaults_and_hand_edits_are_validated(qapp, tmp_path):
    path = tmp_path / "s.ini"
    assert SettingsStore(open_settings(str(path))).load() == UiSettings()
    path.write_text("[General]\ntheme=neon\nsample_period_s=fast\nstart_minimised=true\n"
                    "[alerts]\nthreshold=0.7\nper_gpu=not json\n")
    s = SettingsStore(open_settings(str(path))).load()
    assert s.theme == "system"
    assert s.sample_period_s == UiSettings().sample_period_s
    assert s.start_minimised is True
    assert s.alerts.threshold == 0.7
    assert s.alerts.per_gpu == {}


def test_unwritable_location_reports_failure(qapp, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")  # a file where the settings directory should be: even root fails
    store = SettingsStore(open_settings(str(not_a_dir / "s.ini")))
    assert store.save(UiSettings()) is False


# -- values that cannot be read at all ----------------------------------------------------------

DEEP = "[" * 100_000  # past Python's recursion limit: json.loads raises RecursionError
HUGE_INT = "1" + "0" * 400  # valid JSON; too large for a float: OverflowError


def _hostile_file(path: Path) -> None:
    """A real settings file: a few good values, and values whose reading raises."""
    path.write_text(f"[General]\ntheme={DEEP}\nsample_period_s={HUGE_INT}\n"
                    "start_minimised=true\nhistory_s=1800\n"
                    f"[alerts]\nthreshold=0.7\nmin_interval_s={HUGE_INT}\n")
    qs = open_settings(str(path))  # what QSettings itself writes: an escaped JSON value
    qs.setValue("alerts/per_gpu", json.dumps({"GPU-1": {"threshold": int(HUGE_INT)}}))
    qs.setValue("auto_unload/min_idle_s", "[" * 5000 + "]" * 5000)
    qs.sync()


def test_values_that_cannot_be_read_use_their_defaults_with_one_notice(qapp, tmp_path, caplog):
    path = tmp_path / "s.ini"
    _hostile_file(path)
    caplog.set_level(logging.WARNING)
    store = SettingsStore(open_settings(str(path)))
    s = store.load()
    d = UiSettings()
    assert (s.theme, s.sample_period_s, s.alerts.min_interval_s, s.alerts.per_gpu,
            s.auto_unload.min_idle_s) == (d.theme, d.sample_period_s, d.alerts.min_interval_s,
                                          {}, d.auto_unload.min_idle_s)
    # The values that could be read are kept.
    assert s.start_minimised is True and s.history_s == 1800.0 and s.alerts.threshold == 0.7
    assert store.notice is not None
    for key in ("theme", "sample_period_s", "alerts/min_interval_s", "alerts/per_gpu",
                "auto_unload/min_idle_s"):
        assert key in store.notice
    assert "start_minimised" not in store.notice and str(path) in store.notice
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        store.notice]


def test_a_value_too_large_for_memory_uses_its_default(qapp, tmp_path, monkeypatch):
    path = tmp_path / "s.ini"
    path.write_text("[General]\ntheme=dark\nhistory_s=\"[0, 0, 0]\"\n")
    real = store_module._decode

    def decode(raw):  # as json.loads does when the value outgrows the memory left
        if isinstance(raw, str) and raw.startswith("[0"):
            raise MemoryError
        return real(raw)

    monkeypatch.setattr(store_module, "_decode", decode)
    store = SettingsStore(open_settings(str(path)))
    s = store.load()
    assert s.theme == "dark" and s.history_s == UiSettings().history_s
    assert store.notice is not None and "history_s" in store.notice


def test_a_readable_file_gives_no_notice(qapp, tmp_path):
    path = tmp_path / "s.ini"
    SettingsStore(open_settings(str(path))).save(_custom())
    path.write_text(path.read_text() + "[General]\nunknown_key=[[1]]\n")
    store = SettingsStore(open_settings(str(path)))
    assert store.load() == _custom() and store.notice is None


def test_the_window_starts_with_a_hostile_settings_file(tmp_path):
    """The real start path: the default settings file under XDG_CONFIG_HOME."""
    config = tmp_path / "config"
    folder = config / "vram-steward"
    folder.mkdir(parents=True)
    _hostile_file(folder / "vram-steward.ini")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "VRAM_STEWARD_SETTINGS")}
    env.update(XDG_CONFIG_HOME=str(config), QT_QPA_PLATFORM="offscreen")
    png = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, "main.py", "--demo", "--screenshot", str(png),
                           "--after", "0.5"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    notices = [line for line in done.stderr.splitlines() if "could not be read" in line]
    assert len(notices) == 1 and "theme" in notices[0] and "sample_period_s" in notices[0]
    assert "Traceback" not in done.stderr
