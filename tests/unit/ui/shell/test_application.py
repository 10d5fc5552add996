"""The offscreen screenshot: the app ends, with status 1, however the save fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QWidget

from app.ui.shell.application import _screenshot


class FakeSampler(QObject):
    snapshot_ready = Signal(object)

    def start(self) -> None:
        self.snapshot_ready.emit(object())


class FakeWindow(QWidget):
    def refresh(self) -> None:
        pass


@pytest.fixture
def run(qapp: QApplication):
    made: list[FakeWindow] = []

    def shoot(path: Path, size: tuple[int, int] | None = None) -> int:
        window = FakeWindow()
        made.append(window)
        return _screenshot(window, FakeSampler(), path, 0.05, 0.0, size)

    yield shoot
    for window in made:
        window.close()


def test_screenshot_is_saved(run, tmp_path):
    png = tmp_path / "shot.png"
    assert run(png, (700, 450)) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_folder_is_not_made(run, tmp_path, capsys):
    assert run(tmp_path / "deeper" / "shot.png") == 1
    assert not (tmp_path / "deeper").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vram-steward: could not write the screenshot")


def test_folder_that_cannot_be_made_ends_with_status_1(run, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert run(blocker / "sub" / "shot.png") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vram-steward: could not write the screenshot")


def test_a_save_qt_refuses_ends_with_status_1(run, tmp_path, capsys):
    assert run(tmp_path / "shot.not-an-image-format") == 1
    assert "could not write the screenshot" in capsys.readouterr().err
