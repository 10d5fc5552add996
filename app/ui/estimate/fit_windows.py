"""The main window's one "Will it fit?" dialog: made on first use, raised when
open, given the latest snapshot and the GPU to preselect each time it is asked
for.  :class:`FitDialogs` is mixed into the main window."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QApplication

from app.ui.estimate.fit_dialog import FitDialog
from app.ui.settings.host_list import watched_hosts


class FitDialogs:
    """Opens the dialog; mixed into :class:`~app.ui.window.main_window.MainWindow`."""

    fit_dialog: FitDialog | None = None
    _latest: Any
    settings: Any
    cli_hosts: tuple[Any, ...]
    controller: Any
    gpu_area: Any

    def open_fit_dialog(self, gpu: str | None = None) -> FitDialog:
        """The dialog with ``gpu`` (a display id) chosen; None: the GPU selected in the
        window, else the one chosen before."""
        dialog = self.fit_dialog
        if dialog is None:
            dialog = self.fit_dialog = FitDialog(self)  # type: ignore[arg-type]
            dialog.request.connect(self.submit)  # type: ignore[attr-defined]
            # Quitting with an estimate running: its child is killed and its thread
            # joined before Qt tears the dialog down.
            app = QApplication.instance()
            if app is not None:
                app.aboutToQuit.connect(dialog.runner.shutdown)
        if gpu is None and dialog.inputs.target() is None:
            gpu = self.gpu_area.selected
        configs = watched_hosts(self.settings.hosts, self.cli_hosts)
        dialog.set_snapshot(self._latest, configs, gpu, self.controller.available)
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog


__all__ = ["FitDialogs"]
