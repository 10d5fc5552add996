"""Hosts…: the remote hosts the window watches, added and removed.

Each row says its host's state as the latest snapshot has it (the dialog
asks nothing itself: no I/O on the GUI thread), why it is not connected and
what to do, and the policy its server runs.  Add… checks a host before it is
taken (an error is shown and nothing changes); Remove takes a saved one out.
What changes is handed on as ``hosts_changed(saved hosts)``: the caller
keeps it in the settings and watches it at once.  Hosts given with
``--host`` are shown "for this run": they are not the settings' to remove.

The selected host's pressure policy is its server's; a change is sent by a
:class:`PolicyCourier` (``set_policy`` on a worker thread) and the server's
answer or refusal comes back to the form.  The courier is its owner's and
outlives the dialog, so a dialog closed while a change is in flight is simply
not told.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.hosts import HostView
from app.core.remote.host_config import HostConfig
from app.ui.settings.add_host_dialog import AddHostDialog
from app.ui.settings.host_list import HostEntry, added, host_entries, removed
from app.ui.settings.host_policy_form import HostPolicyForm
from app.ui.settings.host_row import HostRow
from app.ui.settings.policy_courier import PolicyCourier
from app.ui.style import palette as pal
from app.ui.style.text import plain_label


class HostsDialog(QDialog):
    hosts_changed = Signal(object)  # tuple[HostConfig, ...]: the saved hosts now

    def __init__(self, saved: Sequence[HostConfig], given: Sequence[HostConfig] = (),
                 views: Sequence[HostView] = (), courier: PolicyCourier | None = None,
                 parent: QWidget | None = None) -> None:
        """``courier``: carries policy changes to the hosts' servers (None: this
        window cannot change them); its owner keeps it beyond the dialog."""
        super().__init__(parent)
        self.setObjectName("hostsDialog")
        self.setWindowTitle("Hosts")
        self.saved = tuple(saved)
        self.given = tuple(given)
        self.views = tuple(views)
        self.courier = courier
        self.selected = ""
        self.rows: dict[str, HostRow] = {}
        lay = QVBoxLayout(self)
        intro = QLabel("The remote hosts this window watches, each on its own connection: "
                       "one that fails changes only its own tiles and rows.", self)
        intro.setObjectName("secondary")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("hostsScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        body = QWidget(self.scroll)
        body.setObjectName("hostsBody")
        self.rows_layout = QVBoxLayout(body)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(6)
        self.empty_label = QLabel("No remote hosts yet: Add… one that runs "
                                  "<tt>vram-steward serve</tt>.", body)
        self.empty_label.setObjectName("secondary")
        self.empty_label.setWordWrap(True)
        self.rows_layout.addWidget(self.empty_label)
        self.rows_layout.addStretch(1)
        self.scroll.setWidget(body)
        lay.addWidget(self.scroll, 1)
        self.message = plain_label(QLabel(self))  # names the URL added or removed
        self.message.setObjectName("hostsMessage")
        self.message.setWordWrap(True)
        self.message.hide()
        lay.addWidget(self.message)
        self.policy_form = HostPolicyForm(self)
        self.policy_form.apply_requested.connect(self.change_policy)
        lay.addWidget(self.policy_form)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add…", self)
        self.add_button.clicked.connect(self.open_add)
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.clicked.connect(self.remove_selected)
        close = QPushButton("Close", self)
        close.clicked.connect(self.accept)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        lay.addLayout(buttons)
        if courier is not None:  # disconnected when the form is deleted
            courier.answered.connect(self.policy_form.set_answer)
        self.setStyleSheet(pal.view_rules(self.palette())
                           + " QScrollArea#hostsScroll, QWidget#hostsBody "
                             "{ background: transparent; }")
        self._rebuild()
        self.resize(640, 620)

    # -- what the caller hands in ------------------------------------------------------------
    def set_views(self, views: Sequence[HostView]) -> None:
        """The hosts' states from the latest snapshot."""
        self.views = tuple(views)
        self._rebuild()

    def entries(self) -> list[HostEntry]:
        return host_entries(self.saved, self.given, self.views)

    # -- add, remove -----------------------------------------------------------------------------
    def open_add(self) -> None:
        dialog = AddHostDialog(self.add_host, self)
        dialog.exec()
        dialog.deleteLater()

    def add_host(self, config: HostConfig) -> str | None:
        """Check and add ``config``; the error in words (nothing changed) or None."""
        try:
            saved = added(self.saved, self.given, config)
        except ValueError as exc:
            return str(exc)
        self.saved = saved
        self.selected = next((e.key for e in self.entries() if e.config == saved[-1]),
                             self.selected)
        self._say(f"Added {saved[-1].url}: it connects on its own.")
        self.hosts_changed.emit(self.saved)
        self._rebuild()
        return None

    def remove_selected(self) -> None:
        entry = self._entry(self.selected)
        if entry is None or not entry.saved:
            return
        self.saved = removed(self.saved, entry.config.url)
        self.selected = ""
        self._say(f"Removed {entry.config.url}.")
        self.hosts_changed.emit(self.saved)
        self._rebuild()

    def select(self, key: str) -> None:
        self.selected = key
        self._rebuild()

    # -- a host's policy --------------------------------------------------------------------
    def change_policy(self, key: str, changes: dict[str, Any]) -> None:
        """Send ``changes`` to ``key``'s server (the courier's worker thread)."""
        if self.courier is None:
            self.policy_form.set_answer(key, None, "this window cannot change a host's policy")
            return
        self.courier.send(key, changes)

    # -- drawing ----------------------------------------------------------------------------
    def _entry(self, key: str) -> HostEntry | None:
        return next((e for e in self.entries() if e.key == key), None)

    def _say(self, text: str) -> None:
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def _rebuild(self) -> None:
        entries = self.entries()
        keys = [e.key for e in entries]
        if self.selected not in keys:
            self.selected = keys[0] if keys else ""
        if keys != list(self.rows):
            for row in self.rows.values():
                row.deleteLater()
            self.rows = {}
            for i, entry in enumerate(entries):
                row = HostRow(entry, self.scroll.widget())
                row.clicked.connect(self.select)
                self.rows_layout.insertWidget(i, row)
                self.rows[entry.key] = row
        for entry in entries:
            self.rows[entry.key].set_entry(entry)
            self.rows[entry.key].set_selected(entry.key == self.selected)
        self.empty_label.setVisible(not entries)
        self.policy_form.setVisible(bool(entries))
        current = next((e for e in entries if e.key == self.selected), None)
        self.remove_button.setEnabled(current is not None and current.saved)
        self.remove_button.setToolTip(
            "" if current is None or current.saved else
            "Given with --host for this run: it is not in the settings")
        self.policy_form.set_entry(current)


__all__ = ["HostsDialog"]
