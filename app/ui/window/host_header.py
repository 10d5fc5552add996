"""The header over one host's GPUs in the GPU area: which host, whether it is
connected (and since when it is not, and why), and its fullest GPU.

The fullest GPU is named here rather than by moving its tile first: GPUs keep
their order by index, so nothing jumps from one tick to the next.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.core.monitor.hosts import CONNECTED, CONNECTING, HostView
from app.core.monitor.samples import GpuSample
from app.ui.style import palette as pal
from app.ui.style.hosts import stale
from app.ui.style.text import plain_label, plain_tip
from app.ui.window.host_texts import fullest_text, group_state, group_title, short_reason


class HostHeader(QWidget):
    """One host group's header; ``compact``: the overview strip's narrow form
    (one fact a line), otherwise one line, and the reason under it."""

    def __init__(self, key: str, compact: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self.compact = compact
        self.setObjectName("hostHeader")
        self.stale = False
        self._texts: dict[QLabel, str] = {}  # a label's whole text (shown elided)
        self._view_state: str | None = None

        self.title_label = self._label("hostTitle", bold=True)
        self.name_label = self._label("secondary")
        self.state_label = self._label("hostState")
        self.fullest_label = self._label("hostFullest")
        self.reason_label = self._label("hostReason")
        self.reason_label.hide()
        tf = self.title_label.font()
        tf.setPointSizeF(tf.pointSizeF() * (1.0 if compact else 1.08))
        self.title_label.setFont(tf)

        outer = QVBoxLayout(self)
        outer.setContentsMargins(2, 2 if compact else 4, 2, 0)
        outer.setSpacing(1)
        first = QHBoxLayout()
        first.setSpacing(8)
        first.addWidget(self.title_label)
        outer.addLayout(first)
        if compact:
            first.addWidget(self.name_label, 1)
            for label in (self.state_label, self.fullest_label):
                outer.addWidget(label)
        else:  # name, state, then the fullest GPU at the right edge
            first.addWidget(self.name_label)
            first.addSpacing(6)
            first.addWidget(self.state_label, 1)
            first.addWidget(self.fullest_label)
            for label in (self.name_label, self.fullest_label):
                label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        outer.addWidget(self.reason_label)
        if compact:  # the strip is narrow: the reason wraps rather than being cut
            self.reason_label.setWordWrap(True)
            self.reason_label.setSizePolicy(QSizePolicy.Policy.Ignored,
                                            QSizePolicy.Policy.Minimum)
        self.title_label.setSizePolicy(QSizePolicy.Policy.Preferred,
                                       QSizePolicy.Policy.Preferred)
        self._style()

    def _label(self, name: str, bold: bool = False) -> QLabel:
        label = plain_label(QLabel(self))  # names and reasons are the host's words
        label.setObjectName(name)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        if bold:
            font = label.font()
            font.setBold(True)
            label.setFont(font)
        return label

    # -- content ----------------------------------------------------------------------
    def set_group(self, view: HostView | None, gpus: Sequence[GpuSample]) -> None:
        """``view``: the host (None for this machine); ``gpus``: its GPUs shown."""
        title, name = group_title(self.key, view)
        self._set(self.title_label, title)
        self._set(self.name_label, f"({name})" if name else "")
        state = group_state(view)
        self._set(self.state_label, f"● {state}" if state else "")
        if self.compact:  # its own line in the strip: none for this machine
            self.state_label.setVisible(bool(state))
        self._set(self.fullest_label, fullest_text(gpus))
        self.fullest_label.setVisible(bool(self.text_of(self.fullest_label)))
        reason = short_reason(view)
        self._set(self.reason_label, reason)
        self.reason_label.setVisible(bool(reason))
        tip = view.reason if view is not None and view.reason else ""
        where = f"{title}: {view.url}" if view is not None else title
        tooltip = plain_tip(f"{where}\n{tip}" if tip else where)
        if tooltip != self.toolTip():
            self.setToolTip(tooltip)
        self.stale = stale(view)
        view_state = None if view is None else view.state
        if view is not None and view.state == CONNECTING and view.snapshot is not None:
            view_state = "stale"  # reconnecting: its figures are the last known
        if view_state != self._view_state:
            self._view_state = view_state
            self._style()

    def _set(self, label: QLabel, text: str) -> None:
        if self._texts.get(label) != text:
            self._texts[label] = text
            self._elide(label)
            label.setToolTip(plain_tip(text) if label is self.reason_label else "")

    def text_of(self, label: QLabel) -> str:
        """A label's whole text (what it shows may be elided)."""
        return self._texts.get(label, "")

    def _elide(self, label: QLabel) -> None:
        text = self._texts.get(label, "")
        width = label.width()
        whole = label.wordWrap() or label.sizePolicy().horizontalPolicy() != (
            QSizePolicy.Policy.Ignored)
        if whole or width <= 0:
            label.setText(text)
            return
        label.setText(label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, width))

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        for label in self._texts:
            self._elide(label)

    # -- colours ----------------------------------------------------------------------
    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._style()
        super().changeEvent(event)

    def _style(self) -> None:
        palette = self.palette()
        muted = pal.hex_color(pal.muted(palette))
        state = self._view_state
        calm = state in (CONNECTED, CONNECTING, None)
        color = muted if calm else pal.LEVEL_COLORS[pal.LEVEL_WARNING]
        weight = "normal" if calm else "bold"
        self.state_label.setStyleSheet(f"color: {color}; font-weight: {weight};")
        self.reason_label.setStyleSheet(f"color: {muted};")
        self.name_label.setStyleSheet(f"color: {muted};")
        self.fullest_label.setStyleSheet(f"color: {muted};" if self.stale else "")
