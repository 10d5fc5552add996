"""Nothing drawn that nobody sees: the main window while hidden or minimised.

"Start at login" leaves the app in the tray for most of its life.  Then the
sampler still samples, the history still grows, alerts still fire and every
event, decision and OOM report is still taken as it arrives, but no view is
updated: no status text, tile, gauge, legend, plot or table row.  When the
window is shown again the views take the latest snapshot at once and the
plots are redrawn from the history, which kept every sample meanwhile.

The Processes table does the same behind another tab (Activity, Doctor): it
takes the latest snapshot when its tab is chosen.
"""

from __future__ import annotations

from typing import Any

from app.core.monitor.samples import Snapshot


class UnseenViews:
    """Mixed into the main window (its widgets are ``self``'s): whether anyone can
    see it, and the catch-up."""

    _latest: Snapshot | None
    table: Any

    #: True in the app: nothing is drawn while the window is hidden or minimised.
    #: False for a window driven without being shown (tests, scripts): it draws
    #: every snapshot as it comes.
    idle_when_unseen = False
    #: A snapshot came while nobody could see the window: the views are behind.
    _behind = False
    #: A snapshot came while the table was behind another tab.
    _table_behind = False

    def unseen(self) -> bool:
        """Whether nobody can see the window (hidden to the tray, or minimised),
        in a window that idles then (:attr:`idle_when_unseen`)."""
        return self.idle_when_unseen and (not self.isVisible() or self.isMinimized())

    def table_unseen(self) -> bool:
        """Whether the process table is behind another tab (or the window unseen)."""
        return self.idle_when_unseen and not self.table.isVisible()

    def _catch_up(self) -> None:
        """Shown again, or the Processes tab chosen: the views take the latest
        snapshot, and the plots are drawn from the history."""
        latest = self._latest
        if latest is None or self.unseen():
            return
        if self._behind:
            self._behind = False
            self._show_views(latest)  # (the detail view, a window of its own, kept up)
            self.refresh(force=True)
        elif self._table_behind and not self.table_unseen():
            self._table_behind = False
            self.table.update_snapshot(latest)


__all__ = ["UnseenViews"]
