"""Settings survive a restart: written with QSettings, read back by a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
