"""The window's "Hosts…": the dialog opened on the latest snapshot's hosts,
and what it changes kept in the settings and watched at once.

The saved hosts go to the settings (``UiSettings.hosts``, written by the
desktop shell's store) and the Fleet watches them with those given for this
run (``--host``), which are never written.  A host's policy change runs on
a worker thread through the Fleet (``Fleet.set_policy``), on the host's
server; its answer comes back through this shell's courier, which outlives
every dialog (one closed meanwhile is not told).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QObject

from app.core.monitor.samples import Snapshot
from app.core.remote.host_config import HostConfig
from app.ui.settings.host_list import watched_hosts
from app.ui.settings.hosts_dialog import HostsDialog
from app.ui.settings.policy_courier import PolicyCourier

#: The open dialog follows the hosts' states at most this often.
REFRESH_S = 1.0


class HostsShell(QObject):
    def __init__(self, window: Any, fleet: Any = None, save: Callable[[], None] | None = None,
                 parent: QObject | None = None) -> None:
        """``fleet``: the sampler's (None: no hosts can be watched, as in the demo);
        ``save``: writes the settings (None: they are not written)."""
        super().__init__(parent)
        self.window = window
        self.fleet = fleet
        self._save = save
        self.courier = PolicyCourier(fleet.set_policy, self) if fleet is not None else None
        self.dialog: HostsDialog | None = None
        self._latest: Snapshot | None = None
        self._refreshed = 0.0

    def open(self) -> HostsDialog:
        """The Hosts dialog, raised if it is open already."""
        if self.dialog is None:
            views = self._latest.hosts if self._latest is not None else ()
            dialog = HostsDialog(self.window.settings.hosts, self.given(), views,
                                 courier=self.courier, parent=self.window)
            dialog.hosts_changed.connect(self.apply)
            dialog.finished.connect(self._closed)
            self.dialog = dialog
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()
        return self.dialog

    def given(self) -> tuple[HostConfig, ...]:
        return tuple(getattr(self.window, "cli_hosts", ()) or ())

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        if self.dialog is not None and time.monotonic() - self._refreshed >= REFRESH_S:
            self._refreshed = time.monotonic()
            self.dialog.set_views(snapshot.hosts)

    def apply(self, saved: Sequence[HostConfig]) -> None:
        """Keep ``saved`` in the settings, write them, and watch them at once."""
        self.window.settings.hosts = tuple(saved)
        if self._save is not None:
            self._save()
        self.watch(saved)

    def watch(self, saved: Sequence[HostConfig]) -> None:
        """The Fleet watches ``saved`` and the hosts given for this run."""
        if self.fleet is not None:
            self.fleet.set_hosts(watched_hosts(saved, self.given()))

    def _closed(self, _result: int) -> None:
        if self.dialog is not None:
            self.dialog.deleteLater()
        self.dialog = None


__all__ = ["HostsShell"]
