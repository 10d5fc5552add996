"""The GPU area of the main window: every GPU's panel, or an overview and one panel.

Two arrangements, chosen from the room there is (never from the GPU count alone):

* **all**: every panel in a grid (two columns on a wide area); the panels share
  the spare height, so their plots grow with the window;
* **overview**: when the panels at their minimum height do not fit, a strip of
  compact tiles (used/total, SM %, a mini history) beside the selected GPU's
  full panel, as Task Manager's sidebar does.  A panel is made when first
  shown; hidden ones are not drawn.

With remote hosts the GPUs are grouped by host, in both arrangements: this
machine first (while it has GPUs), then the hosts in their configured order,
each under a header (:class:`HostHeader`) that says whether it is connected and
names its fullest GPU; within a group GPUs keep their index order.  A host
still connecting has its header alone; a disconnected one keeps its last tiles
and panels, greyed; a host removed loses them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from PySide6.QtCore import QPoint, QRect, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.history import History
from app.core.monitor.hosts import LOCAL, HostView
from app.core.monitor.plot_data import device_series
from app.core.monitor.samples import GpuSample
from app.ui.gpu.panel import MIN_HEIGHT, GpuPanel
from app.ui.gpu.tile import GpuTile, strip_width
from app.ui.style.hosts import stale, state_text
from app.ui.window.host_header import HostHeader
from app.ui.window.texts import display_order

TWO_COLUMNS_FROM = 1400  # px of the area's width, for the "all" arrangement
TILE_STRIP_WIDTH = 232  # px
TILE_BUCKETS = 96  # mini-history points per tile


class GpuArea(QWidget):
    """Owns the panels and tiles; the window feeds it samples and asks what to draw."""

    #: The user picked a GPU in the overview (its display id).
    gpu_selected = Signal(str)
    #: The arrangement changed ("all" or "overview").
    arrangement_changed = Signal(str)

    def __init__(self, make_panel: Callable[[str], GpuPanel],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._make_panel = make_panel
        self.panels: dict[str, GpuPanel] = {}
        self.tiles: dict[str, GpuTile] = {}  # every GPU has one
        self.samples: dict[str, GpuSample] = {}  # the latest sample of every GPU
        self.arrangement = "all"
        self.selected: str | None = None
        self.columns = 1
        self._tiles_drawn: tuple[float, float] | None = None  # (monotonic time, span)
        #: The host groups shown, in order ("" = this machine), and their views.
        self.groups: list[str] = []
        self.views: dict[str, HostView] = {}
        #: Each group's header over its panels ("all") and over its tiles ("overview").
        self.headers: dict[str, HostHeader] = {}
        self.strip_headers: dict[str, HostHeader] = {}
        self._order: list[str] | None = None  # ordered(), until GPUs or groups change

        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(10)
        self.tile_scroll = QScrollArea(self)
        self.tile_scroll.setObjectName("tileScroll")
        self.tile_scroll.setWidgetResizable(True)
        self.tile_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.tile_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tile_scroll.setFixedWidth(TILE_STRIP_WIDTH)
        tiles_host = QWidget(self.tile_scroll)
        tiles_host.setObjectName("tilesHost")
        self.tiles_layout = QVBoxLayout(tiles_host)
        self.tiles_layout.setContentsMargins(0, 0, 6, 0)
        self.tiles_layout.setSpacing(6)
        self.tiles_layout.addStretch(1)
        self.tile_scroll.setWidget(tiles_host)
        self.tile_scroll.hide()

        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("gpuScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.panels_host = QWidget(self.scroll)
        self.panels_host.setObjectName("panelsHost")
        self.grid = QGridLayout(self.panels_host)
        self.grid.setContentsMargins(0, 0, 4, 0)
        self.grid.setSpacing(12)
        self.empty_label = QLabel("Waiting for the first sample…", self.panels_host)
        self.empty_label.setObjectName("secondary")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.grid.addWidget(self.empty_label, 0, 0)
        self.scroll.setWidget(self.panels_host)
        row.addWidget(self.tile_scroll, 0)
        row.addWidget(self.scroll, 1)

    # -- samples -------------------------------------------------------------------------
    def update_gpus(self, gpus: Iterable[GpuSample], hosts: Sequence[HostView] = ()) -> None:
        """Make, update and drop tiles (and the panels made so far) for ``gpus``:
        this machine's and every host's (``hosts``: their views, in order).

        A panel is made when it is first shown (:meth:`arrange`): behind the
        overview, a GPU costs a tile, not a plot."""
        self.views = {v.key: v for v in hosts}
        seen: set[str] = set()
        added = False
        for gpu in gpus:
            did = gpu.display_id
            seen.add(did)
            self.samples[did] = gpu
            tile = self.tiles.get(did)
            if tile is None:
                tile = self.tiles[did] = GpuTile(did, self)
                tile.clicked.connect(self._on_tile_clicked)
                added = True
            tile.set_sample(gpu)
            tile.set_stale(self._stale(gpu)[0])
            panel = self.panels.get(did)
            if panel is not None:
                self._feed(panel, gpu)
        gone = [d for d in self.tiles if d not in seen]
        if added or gone:
            self._order = None
        for did in gone:
            self.tiles.pop(did).deleteLater()
            self.samples.pop(did, None)
            panel = self.panels.pop(did, None)
            if panel is not None:
                self.grid.removeWidget(panel)
                panel.deleteLater()
        regrouped = self._update_groups(hosts)
        if added or gone or regrouped:
            if self.selected not in self.tiles:
                self.selected = self.ordered()[0] if self.tiles else None
            self.arrange()

    def _update_groups(self, hosts: Sequence[HostView]) -> bool:
        """The groups' headers (only with remote hosts); whether the groups changed."""
        groups: list[str] = []
        if hosts:
            if any(not s.host for s in self.samples.values()):
                groups.append(LOCAL)
            groups.extend(v.key for v in hosts)
        changed = groups != self.groups
        if changed:
            self.groups, self._order = groups, None
        grouped = [(k or LOCAL, d) for k, d in self._grouped(self.ordered())] if groups else []
        for headers, compact in ((self.headers, False), (self.strip_headers, True)):
            for key in [k for k in headers if k not in groups]:
                headers.pop(key).deleteLater()
            for key, dids in grouped:
                header = headers.get(key)
                if header is None:
                    parent = self.tile_scroll.widget() if compact else self.panels_host
                    header = headers[key] = HostHeader(key, compact, parent)
                    header.hide()  # shown where arrange() puts it
                header.set_group(self.views.get(key), [self.samples[d] for d in dids])
        return changed

    def ordered(self) -> list[str]:
        """Every GPU, by host group, then by index (never by fullness: nothing jumps)."""
        if self._order is None:
            hosts = [k for k in self.groups if k]
            self._order = sorted(self.tiles, key=lambda did: display_order(did, hosts))
        return list(self._order)

    def _grouped(self, order: list[str]) -> list[tuple[str | None, list[str]]]:
        """(group key, its GPUs) in order; one group without a header (None) when
        there are no remote hosts."""
        if not self.groups:
            return [(None, order)]
        return [(key, [d for d in order if self.samples[d].host == key]) for key in self.groups]

    def _panel(self, did: str) -> GpuPanel:
        """``did``'s panel, made (with the latest sample) on first use."""
        panel = self.panels.get(did)
        if panel is None:
            panel = self.panels[did] = self._make_panel(did)
            self._feed(panel, self.samples[did])
        return panel

    def _stale(self, gpu: GpuSample) -> tuple[str | None, str]:
        """("disconnected since …", why) while ``gpu``'s host is not connected;
        (None, "") while its figures are current."""
        view = self.views.get(gpu.host)
        if view is None or not stale(view):
            return None, ""
        return state_text(view), view.reason or ""

    def _feed(self, panel: GpuPanel, gpu: GpuSample) -> None:
        panel.set_stale(*self._stale(gpu))
        panel.update_sample(gpu)

    # -- arrangement ---------------------------------------------------------------------
    def wanted_arrangement(self) -> tuple[str, int]:
        """("all" | "overview", columns) for the room the area has now."""
        n = len(self.tiles)
        if n <= 1 or not self.isVisible():
            return "all", 1  # a window never shown has no room to measure
        cols = 2 if self.width() >= TWO_COLUMNS_FROM else 1
        groups = self._grouped(self.ordered())
        rows = sum(-(-len(dids) // cols) for _, dids in groups)
        made = [p.minimumHeight() for p in self.panels.values()]
        unmade = [max(made, default=MIN_HEIGHT)] * (n - len(made))  # as tall as the tallest
        spacing = self.grid.spacing()
        need = sum(sorted(made + unmade, reverse=True)[:rows]) + (rows - 1) * spacing
        need += sum(h.sizeHint().height() + spacing for h in self.headers.values())
        room = self.height()
        if room <= 0 or need <= room:
            return "all", cols
        return "overview", 1

    def arrange(self) -> None:
        """Lay the panels (and tiles) out for the room there is."""
        arrangement, cols = self.wanted_arrangement()
        changed = arrangement != self.arrangement
        self.arrangement, self.columns = arrangement, cols
        grid = self.grid
        while grid.count():
            grid.takeAt(0)
        for r in range(grid.rowCount()):
            grid.setRowStretch(r, 0)
        for header in self.headers.values():
            header.hide()
        self.empty_label.setVisible(not self.tiles and not self.headers)
        order = self.ordered()
        if not self.tiles:
            self._arrange_headers_only()
            self.tile_scroll.hide()
            return
        shown = [self.selected or order[0]] if arrangement == "overview" else order
        for did, panel in self.panels.items():
            panel.setVisible(did in shown)
        row = 0
        for key, dids in self._grouped(order) if arrangement == "all" else [(None, shown)]:
            if key is not None:
                self.headers[key].show()
                grid.addWidget(self.headers[key], row, 0, 1, cols)
                row += 1
            for i, did in enumerate(dids):
                panel = self._panel(did)
                panel.setVisible(True)
                grid.addWidget(panel, row + i // cols, i % cols)
                grid.setRowStretch(row + i // cols, 1)  # the panels share the spare height
            row += -(-len(dids) // cols)
        for c in range(2):
            grid.setColumnStretch(c, 1 if c < cols else 0)
        self._arrange_tiles(order)
        self._tiles_drawn = None  # new tiles, or shown again: draw their history next
        self.tile_scroll.setVisible(arrangement == "overview")
        grid.activate()
        if changed:
            self.arrangement_changed.emit(arrangement)

    def _arrange_headers_only(self) -> None:
        """No GPU yet: the hosts' headers ("connecting…"), or the waiting line."""
        grid = self.grid
        if not self.headers:
            grid.addWidget(self.empty_label, 0, 0)
            return
        for row, key in enumerate(self.groups):
            self.headers[key].show()
            grid.addWidget(self.headers[key], row, 0)
        grid.setRowStretch(len(self.groups), 1)

    def _arrange_tiles(self, order: list[str]) -> None:
        lay = self.tiles_layout
        while lay.count():
            lay.takeAt(0)
        for n, (key, dids) in enumerate(self._grouped(order)):
            if key is not None:
                header = self.strip_headers[key]
                header.show()
                if n:
                    lay.addSpacing(8)  # a group apart from the one above
                lay.addWidget(header)
            for did in dids:
                tile = self.tiles[did]
                tile.set_selected(did == self.selected)
                lay.addWidget(tile)
        lay.addStretch(1)
        self._fit_strip()

    def _fit_strip(self) -> None:
        """The strip as wide as its tiles' whole names need, within 28 % of the area."""
        extra = (self.tiles_layout.contentsMargins().right()
                 + self.tile_scroll.verticalScrollBar().sizeHint().width())
        self.tile_scroll.setFixedWidth(strip_width(
            self.tiles.values(), TILE_STRIP_WIDTH, self.width() * 28 // 100, extra))

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.arrangement == "overview":
            self._fit_strip()
        if self.tiles and self.wanted_arrangement() != (self.arrangement, self.columns):
            # Later, once: a resize inside a layout pass must not re-enter it.
            QTimer.singleShot(0, self.arrange)

    # -- selection -----------------------------------------------------------------------
    def select_gpu(self, display_id: str) -> None:
        """Show ``display_id``'s panel (in the overview) and scroll it into view."""
        if display_id not in self.tiles:
            return
        if display_id != self.selected:
            self.selected = display_id
            for did, tile in self.tiles.items():
                tile.set_selected(did == display_id)
            if self.arrangement == "overview":
                self.arrange()
        if self.isVisible() and self.arrangement == "all" and display_id in self.panels:
            self.scroll.ensureWidgetVisible(self.panels[display_id], 0, 0)

    def _on_tile_clicked(self, display_id: str) -> None:
        self.select_gpu(display_id)
        self.gpu_selected.emit(display_id)

    # -- what to draw --------------------------------------------------------------------
    def on_screen(self, panel: GpuPanel) -> bool:
        """Whether ``panel`` is shown: not hidden by the overview, not scrolled away."""
        if panel.isHidden():
            return False
        if not self.isVisible() or not panel.isVisible():
            return True  # not laid out yet: draw rather than risk a blank plot
        viewport = self.scroll.viewport()
        top_left = panel.mapTo(viewport, QPoint(0, 0))
        return QRect(top_left, panel.size()).intersects(viewport.rect())

    def refresh_tiles(self, history: History, span_s: float) -> None:
        """The tiles' mini histories (only while the overview shows them), about once
        per tile pixel of time: at 1 h one point of a tile holds ~40 s."""
        if self.arrangement != "overview":
            self._tiles_drawn = None
            return
        now = time.monotonic()
        if self._tiles_drawn is not None:
            at, span = self._tiles_drawn
            if span == span_s and now - at < max(1.0, span_s / TILE_BUCKETS / 2):
                return
        self._tiles_drawn = (now, span_s)
        for did, tile in self.tiles.items():
            x, used = device_series(history, did, span_s, TILE_BUCKETS)
            tile.set_history(x, used, self.samples[did].memory_total, span_s)
