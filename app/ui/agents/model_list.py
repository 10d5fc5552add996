"""The detail view's model list: a table model of the models one agent reports
(state badge, size, device, idle clock, ...) and the State column's badge.

Per snapshot the model only emits dataChanged; rows are reset only when the
set of models changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from app.core.agents.events import target_text
from app.core.agents.types import ModelInfo
from app.core.units import NA, fmt_bytes, fmt_count
from app.ui.agents.model_actions import (
    idle_seconds,
    idle_text,
    idle_tooltip,
    is_moving,
    model_blocker_tooltip,
    model_device,
    model_facts,
    state_text,
)
from app.ui.style import palette as pal
from app.ui.style.text import plain_tip

MODEL_COLUMNS = ("Name", "State", "Size", "Device", "Idle", "Pinned", "Mode", "Dtype", "Params",
                 "Class")
(MCOL_NAME, MCOL_STATE, MCOL_SIZE, MCOL_DEVICE, MCOL_IDLE, MCOL_PINNED, MCOL_MODE, MCOL_DTYPE,
 MCOL_PARAMS, MCOL_CLASS) = range(len(MODEL_COLUMNS))
MCOL_LAST = MCOL_IDLE  # "Last used" became "Idle" ("idle 3 min", "in use", "n/a")
_MODEL_NUMERIC = {MCOL_PARAMS, MCOL_SIZE}
MODEL_SORT_ROLE = Qt.ItemDataRole.UserRole + 1
MODEL_ID_ROLE = Qt.ItemDataRole.UserRole + 2
#: (badge text, colour key, moving) for the State column's delegate.
MODEL_BADGE_ROLE = Qt.ItemDataRole.UserRole + 3


def model_name(m: ModelInfo) -> str:
    return f"{m.name} ({m.group})" if m.group else m.name


def model_size(m: ModelInfo) -> int | None:
    if m.param_bytes is None and m.buffer_bytes is None:
        return None
    return (m.param_bytes or 0) + (m.buffer_bytes or 0)


def model_mode(m: ModelInfo) -> str:
    if m.training is None:
        return NA
    return "train" if m.training else "eval"


def badge_key(m: ModelInfo, pending=None) -> str:
    """"resident", "cpu", "disk" or "moving": the badge's colour."""
    if is_moving(m, pending):
        return "moving"
    if m.state == "offloaded":
        return "disk" if m.offloaded_to == "disk" else "cpu"
    return "resident"


BADGE_COLORS = {"resident": pal.BREAKDOWN_PARAMS, "cpu": "#009E73", "disk": "#CC79A7",
                "moving": pal.AGENT_COLOR}  # a state in progress, not a memory level


class ModelListModel(QAbstractTableModel):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._models: list[ModelInfo] = []
        self._now = 0.0
        self._pending: dict[str, object] = {}  # model id -> ModelAction in flight
        #: Animation phase of the busy badges (advanced by the view's timer).
        self.phase = 0

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(self._models)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(MODEL_COLUMNS)

    def set_models(self, models: tuple[ModelInfo, ...], now: float,
                   pending: Mapping[str, object] | None = None) -> None:
        models = list(models)
        pending = dict(pending or {})
        same_rows = [m.id for m in models] == [m.id for m in self._models]
        changed = models != self._models or now != self._now or pending != self._pending
        self._now = now
        self._pending = pending
        if not same_rows:
            self.beginResetModel()
            self._models = models
            self.endResetModel()
        elif changed and models:
            self._models = models
            self.dataChanged.emit(self.index(0, 0), self.index(len(models) - 1,
                                                               len(MODEL_COLUMNS) - 1))

    def moving_rows(self) -> list[int]:
        return [i for i, m in enumerate(self._models) if is_moving(m, self._pending.get(m.id))]

    def tick(self) -> None:
        """Advance the busy badges' animation (repaints the State cells of moving rows)."""
        self.phase += 1
        for row in self.moving_rows():
            idx = self.index(row, MCOL_STATE)
            self.dataChanged.emit(idx, idx, [MODEL_BADGE_ROLE])

    def model_at(self, row: int) -> ModelInfo | None:
        return self._models[row] if 0 <= row < len(self._models) else None

    def row_of(self, model_id: str) -> int:
        return next((i for i, m in enumerate(self._models) if m.id == model_id), -1)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return MODEL_COLUMNS[section]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int((Qt.AlignmentFlag.AlignRight if section in _MODEL_NUMERIC
                        else Qt.AlignmentFlag.AlignLeft) | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            return {MCOL_PARAMS: "Number of parameters",
                    MCOL_SIZE: "Bytes of parameters + buffers",
                    MCOL_STATE: "Where the weights are: resident on the GPU, or offloaded to "
                                "host memory (CPU) or disk until the next forward pass",
                    MCOL_DEVICE: "The GPU the weights belong on (also while offloaded)",
                    MCOL_IDLE: "The agent's idle clock: time since the last forward pass "
                               "(before the first one: since the agent first saw the model)",
                    MCOL_MODE: "Train or eval mode (model.training). Whether a model counts "
                               "as training is the agent's training evidence (in the tooltips)",
                    MCOL_PINNED: "Pinned models are never unloaded automatically"}.get(section)
        return None

    def text(self, m: ModelInfo, col: int) -> str:
        if col == MCOL_NAME:
            return model_name(m)
        if col == MCOL_STATE:
            return state_text(m, self._pending.get(m.id))
        if col == MCOL_CLASS:
            return m.class_name.rsplit(".", 1)[-1]
        if col == MCOL_PARAMS:
            return fmt_count(m.params)
        if col == MCOL_SIZE:
            return fmt_bytes(model_size(m))
        if col == MCOL_DEVICE:
            return model_device(m)
        if col == MCOL_DTYPE:
            return (m.dtype or NA).removeprefix("torch.")
        if col == MCOL_MODE:
            return model_mode(m)
        if col == MCOL_IDLE:
            return idle_text(m, self._now)
        if col == MCOL_PINNED:
            return "pinned" if m.pinned else ""
        return ""

    def raw(self, m: ModelInfo, col: int):
        if col == MCOL_PARAMS:
            return m.params if m.params is not None else -1
        if col == MCOL_SIZE:
            size = model_size(m)
            return size if size is not None else -1
        if col == MCOL_IDLE:
            idle = idle_seconds(m, self._now)
            return idle if idle is not None else -1.0
        if col == MCOL_STATE:
            return ("resident", "unloading", "reloading", "offloaded").index(m.state) \
                if m.state in ("resident", "unloading", "reloading", "offloaded") else 9
        if col == MCOL_PINNED:
            return int(m.pinned)
        return self.text(m, col).lower()

    def _tooltip(self, m: ModelInfo, col: int) -> str | None:
        if col == MCOL_NAME:
            parts = [model_name(m), m.class_name, f"id {m.id}"]
            for dev, per in sorted(m.bytes_by_device.items()):
                parts.append(f"{dev}: params {fmt_bytes(per.get('params'))}, "
                             f"buffers {fmt_bytes(per.get('buffers'))}")
            parts += model_facts(m)
            parts += ["", model_blocker_tooltip(m)]
            return "\n".join(parts)
        if col == MCOL_STATE:
            pending = self._pending.get(m.id)
            text = state_text(m, pending)
            if m.state == "offloaded":
                text += (f" — {fmt_bytes(model_size(m))} of weights wait in "
                         f"{'host memory' if m.offloaded_to != 'disk' else 'a file on disk'}; "
                         "the next forward pass (or Reload) brings them back")
            elif is_moving(m, pending):
                text += " — the weights are being moved"
            return text + "\n\n" + model_blocker_tooltip(m)
        if col == MCOL_SIZE:
            text = (f"parameters {fmt_bytes(m.param_bytes)} + "
                    f"buffers {fmt_bytes(m.buffer_bytes)}")
            if m.placeholder_bytes:
                text += (f"\nplus {fmt_bytes(m.placeholder_bytes)} of meta placeholders "
                         "(weights held elsewhere, not on any device here)")
            return text
        if col == MCOL_MODE:
            mode = f"{model_mode(m)} mode" if m.training is not None else "mode unknown"
            return mode + (f"; training evidence: {m.training_evidence}"
                           if m.training_evidence else "")
        if col == MCOL_PARAMS and m.params is not None:
            return f"{m.params:,} parameters"
        if col == MCOL_DEVICE and m.state != "resident":
            return (f"Home device {model_device(m)}; the weights are now on "
                    f"{m.device or target_text(m.offloaded_to)}")
        if col == MCOL_IDLE:
            return idle_tooltip(m) + "\n\n" + model_blocker_tooltip(m)
        if col == MCOL_PINNED:
            return model_blocker_tooltip(m)
        if col == MCOL_CLASS:
            return m.class_name
        return None

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        m = self._models[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(m, col)
        if role == MODEL_SORT_ROLE:
            return self.raw(m, col)
        if role == MODEL_ID_ROLE:
            return m.id
        if role == MODEL_BADGE_ROLE:
            pending = self._pending.get(m.id)
            return (state_text(m, pending), badge_key(m, pending), is_moving(m, pending))
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int((Qt.AlignmentFlag.AlignRight if col in _MODEL_NUMERIC
                        else Qt.AlignmentFlag.AlignLeft) | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:  # names the model: the process's words
            tip = self._tooltip(m, col)
            return plain_tip(tip) if tip else tip
        if role == Qt.ItemDataRole.ForegroundRole:
            text = self.text(m, col)
            if text == NA or (col == MCOL_IDLE and text == "in use"):
                from PySide6.QtGui import QGuiApplication

                return pal.muted(QGuiApplication.palette())
        return None

    def models(self) -> list[ModelInfo]:
        return list(self._models)


class BadgeDelegate(QStyledItemDelegate):
    """The State column: a rounded badge; an animated stripe while the model moves."""

    def paint(self, painter: QPainter, option, index) -> None:
        badge = index.data(MODEL_BADGE_ROLE)
        if not badge:
            super().paint(painter, option, index)
            return
        text, key, moving = badge
        # Row background (selection / alternate) as the style draws it, without text.
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = option.fontMetrics
        h = min(option.rect.height() - 6, fm.height() + 4)
        w = min(option.rect.width() - 8, fm.horizontalAdvance(text) + 18)
        rect = QRectF(option.rect.left() + 4, option.rect.center().y() - h / 2 + 0.5, w, h)
        color = QColor(BADGE_COLORS.get(key, pal.BREAKDOWN_PARAMS))
        fill = QColor(color)
        fill.setAlpha(40)
        path = QPainterPath()
        path.addRoundedRect(rect, h / 2, h / 2)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        if selected:  # stays readable on the selection colour
            painter.fillPath(path, option.palette.color(QPalette.ColorRole.Base))
        painter.fillPath(path, fill)
        if moving:
            # Indeterminate progress: a soft band sweeping through the badge.
            model = index.model()
            phase = getattr(model, "phase", None)
            if phase is None and hasattr(model, "sourceModel"):
                phase = getattr(model.sourceModel(), "phase", 0)
            band = rect.width() * 0.35
            x = rect.left() - band + ((phase or 0) % 24) / 24 * (rect.width() + band)
            painter.setClipPath(path)
            sweep = QColor(color)
            sweep.setAlpha(90)
            painter.fillRect(QRectF(x, rect.top(), band, rect.height()), sweep)
            painter.setClipping(False)
        pen_color = QColor(color)
        painter.setPen(pen_color)
        painter.drawPath(path)
        fg = option.palette.color(QPalette.ColorRole.Text)
        painter.setPen(fg)
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignCenter), text)
        painter.restore()

    def sizeHint(self, option, index) -> QSize:  # noqa: N802
        base = super().sizeHint(option, index)
        badge = index.data(MODEL_BADGE_ROLE)
        if badge:
            base.setWidth(option.fontMetrics.horizontalAdvance(badge[0]) + 30)
        return base


__all__ = ["BADGE_COLORS", "MCOL_CLASS", "MCOL_DEVICE", "MCOL_DTYPE", "MCOL_IDLE", "MCOL_LAST",
           "MCOL_MODE", "MCOL_NAME", "MCOL_PARAMS", "MCOL_PINNED", "MCOL_SIZE", "MCOL_STATE",
           "MODEL_BADGE_ROLE", "MODEL_COLUMNS", "MODEL_ID_ROLE", "MODEL_SORT_ROLE",
           "BadgeDelegate", "ModelListModel", "badge_key", "model_mode", "model_name",
           "model_size"]
