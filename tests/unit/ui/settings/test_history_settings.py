"""The stored-history settings: values, the file round trip, the dialog's page."""

from __future__ import annotations

from app.core.store.tiers import Retention
from app.ui.settings.dialog import SettingsDialog
from app.ui.settings.history_page import bound_text
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import StoredHistorySettings, UiSettings


def test_defaults_are_an_hour_and_a_week():
    s = UiSettings().stored_history
    assert s.keep and s.fine_min == 60 and s.coarse_days == 7
    assert s.retention() == Retention(3600.0, 7 * 86400.0)


def test_bad_values_fall_back_or_clamp():
    s = UiSettings.from_dict({"stored_history": {"keep": "maybe", "fine_min": "x",
                                                 "coarse_days": 10_000}}).stored_history
    assert s == StoredHistorySettings(True, 60, 365)
    assert UiSettings.from_dict({"stored_history": {"fine_min": 0}}).stored_history.fine_min == 1


def test_round_trip_through_the_settings_file(qapp, tmp_path):
    path = str(tmp_path / "settings.ini")
    s = UiSettings()
    s.stored_history = StoredHistorySettings(False, 15, 30)
    assert SettingsStore(open_settings(path)).save(s)
    loaded = SettingsStore(open_settings(path)).load()
    assert loaded.stored_history == StoredHistorySettings(False, 15, 30)
    assert "[stored_history]\ncoarse_days=30\nfine_min=15" in (tmp_path / "settings.ini").read_text()


def test_dialog_edits_and_shows_the_bound(qtbot):
    s = UiSettings()
    dialog = SettingsDialog(s)
    qtbot.addWidget(dialog)
    page = dialog.history_page
    assert page.keep_box.isChecked() and page.fine_spin.value() == 60
    before = page.bound_label.text()
    assert before == bound_text(s.stored_history) and "MiB" in before
    page.coarse_spin.setValue(30)
    assert page.bound_label.text() != before
    page.fine_spin.setValue(120)
    page.keep_box.setChecked(False)
    assert not page.fine_spin.isEnabled()
    assert page.bound_label.text().startswith("Nothing is recorded")
    assert dialog.settings().stored_history == StoredHistorySettings(False, 120, 30)


def test_bound_text_names_both_machines():
    text = bound_text(StoredHistorySettings(), gpus=1)
    assert "1 GPU with 3 processes each" in text and "8 GPUs with 64 processes each" in text
