"""The process detail view: what one process's agent reports (its VRAM
breakdown per GPU, its allocator figures and its models) and the model actions.

Per snapshot these widgets only set text and bar values; rows are pooled and
created only when more are needed than ever before.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QRectF,
    QSize,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.core.agents.types import AgentReport, ModelInfo
from app.core.monitor.naming import process_label
from app.core.monitor.samples import Snapshot
from app.ui.agents.model_actions import (
    PIN,
    RELOAD,
    UNLOAD,
    force_consequences,
    idle_seconds,
    idle_text,
    idle_tooltip,
    is_moving,
    model_blocker_tooltip,
    model_device,
    model_facts,
    model_note,
    state_text,
    target_text,
)
from app.ui.gpu.torch_memory import (
    BreakdownLegend,
    BreakdownRow,
    bar_total,
    breakdown_of,
    breakdown_tooltip,
    free_button_text,
)
from app.ui.style import palette as pal
from app.ui.style.format import NA, fmt_bytes, fmt_count

# -- detail view: model list ------------------------------------------------------------------

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
                "moving": pal.LEVEL_COLORS[pal.LEVEL_WARNING]}


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
            text = (f"parameters {fmt_bytes(m.param_bytes, 2)} + "
                    f"buffers {fmt_bytes(m.buffer_bytes, 2)}")
            if m.placeholder_bytes:
                text += (f"\nplus {fmt_bytes(m.placeholder_bytes, 2)} of meta placeholders "
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
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(m, col)
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


# -- detail view --------------------------------------------------------------------------------

def _yes_no(value: bool | None, yes: str = "yes", no: str = "no") -> str:
    return NA if value is None else (yes if value else no)


def _sum_known(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class ProcessDetailView(QDialog):
    """Everything one agent reports about its process; non-modal, follows snapshots."""

    free_requested = Signal(int)  # pid
    gc_requested = Signal(int)  # pid
    #: {"kind": "unload"|"reload"|"pin", "pid", "model", "name", "to", "force", "pinned"}
    model_action_requested = Signal(object)
    idle_unload_requested = Signal(int, object)  # pid, seconds (None = off)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("processDetail")
        self.setWindowTitle("Process details")
        self.setModal(False)
        self.resize(1180, 640)
        self.pid: int | None = None
        self.report: AgentReport | None = None
        self.cache_total: int | None = None
        self._label = ""

        outer = QVBoxLayout(self)
        outer.setContentsMargins(16, 14, 16, 12)
        outer.setSpacing(10)

        self.title_label = QLabel(self)
        self.title_label.setObjectName("detailTitle")
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.25)
        self.title_label.setFont(tf)
        self.command_label = QLabel(self)
        self.command_label.setObjectName("secondary")
        self.command_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.command_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.title_label)
        outer.addWidget(self.command_label)

        facts = QGridLayout()
        facts.setHorizontalSpacing(10)
        facts.setVerticalSpacing(3)
        self.facts: dict[str, QLabel] = {}
        layout_ = (("PID", "Python", "PyTorch", "Allocator"),
                   ("CUDA", "OOMs", "Alloc retries", "Agent"))
        for col, names in enumerate(layout_):
            for row, name in enumerate(names):
                cap = QLabel(name, self)
                cap.setObjectName("secondary")
                value = QLabel(NA, self)
                value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                facts.addWidget(cap, row, col * 2)
                facts.addWidget(value, row, col * 2 + 1)
                self.facts[name] = value
        facts.setColumnMinimumWidth(1, self.fontMetrics().horizontalAdvance("0" * 24))
        facts.setColumnStretch(4, 1)
        outer.addLayout(facts)
        self.errors_label = QLabel(self)
        self.errors_label.setWordWrap(True)
        self.errors_label.setVisible(False)
        outer.addWidget(self.errors_label)

        line = QFrame(self)
        line.setFrameShape(QFrame.Shape.HLine)
        line.setObjectName("detailRule")
        outer.addWidget(line)

        bhead = QHBoxLayout()
        bt = QLabel("VRAM by GPU", self)
        btf = bt.font()
        btf.setBold(True)
        bt.setFont(btf)
        bhead.addWidget(bt)
        bhead.addSpacing(12)
        self.legend = BreakdownLegend(self)
        bhead.addWidget(self.legend)
        bhead.addStretch(1)
        outer.addLayout(bhead)
        self.gpu_rows_box = QVBoxLayout()
        self.gpu_rows_box.setSpacing(3)
        outer.addLayout(self.gpu_rows_box)
        self.gpu_rows: list[BreakdownRow] = []
        self.no_gpu_label = QLabel("Not on any GPU in the latest sample.", self)
        self.no_gpu_label.setObjectName("secondary")
        outer.addWidget(self.no_gpu_label)

        mhead = QHBoxLayout()
        mhead.setSpacing(8)
        mt = QLabel("Models", self)
        mt.setFont(btf)
        self.models_title = mt
        mhead.addWidget(mt)
        mhead.addStretch(1)
        # The process's own idle timer (the agent unloads idle models by itself).
        self.idle_box = QCheckBox("Unload idle models after", self)
        self.idle_box.setObjectName("idleUnloadBox")
        self.idle_spin = QSpinBox(self)
        self.idle_spin.setObjectName("idleUnloadMinutes")
        self.idle_spin.setRange(1, 24 * 60)
        self.idle_spin.setSuffix(" min")
        self.idle_spin.setValue(30)
        self.idle_spin.setKeyboardTracking(False)
        self.idle_state = QLabel("", self)
        self.idle_state.setObjectName("secondary")
        tip = ("The agent inside the process unloads its GPU models to host memory once "
               "they have been idle this long (no forward pass; before the first one, since "
               "the agent first saw them). Pinned models, models with training evidence and "
               "those the agent cannot move are left alone. It works even when this app is "
               "not running.")
        for w in (self.idle_box, self.idle_spin, self.idle_state):
            w.setToolTip(tip)
        mhead.addWidget(self.idle_box)
        mhead.addWidget(self.idle_spin)
        mhead.addWidget(self.idle_state)
        outer.addSpacing(4)
        outer.addLayout(mhead)
        self.idle_box.toggled.connect(self._on_idle_toggled)
        self.idle_spin.valueChanged.connect(self._on_idle_minutes)
        self._idle_sent: object = ...  # last value asked for (... = none yet)
        self._idle_pending = False

        self.model_model = ModelListModel(self)
        self.model_proxy = QSortFilterProxyModel(self)
        self.model_proxy.setSourceModel(self.model_model)
        self.model_proxy.setSortRole(MODEL_SORT_ROLE)
        self.model_proxy.setDynamicSortFilter(True)
        self.models_view = QTableView(self)
        self.models_view.setObjectName("modelTable")
        self.models_view.setModel(self.model_proxy)
        self.models_view.setItemDelegateForColumn(MCOL_STATE, BadgeDelegate(self.models_view))
        self.models_view.setSortingEnabled(True)
        self.models_view.sortByColumn(MCOL_SIZE, Qt.SortOrder.DescendingOrder)
        self.models_view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.models_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.models_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.models_view.setAlternatingRowColors(True)
        self.models_view.setShowGrid(False)
        self.models_view.setWordWrap(False)
        self.models_view.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.models_view.verticalHeader().setVisible(False)
        self.models_view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 10)
        header = self.models_view.horizontalHeader()
        header.setHighlightSections(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(MCOL_NAME, QHeaderView.ResizeMode.Stretch)
        fm = self.fontMetrics()
        for col, sample in ((MCOL_STATE, "Offloaded to disk"), (MCOL_CLASS, "UNet2DConditionModel"),
                            (MCOL_PARAMS, "000.0 M"), (MCOL_SIZE, "000.0 MiB"),
                            (MCOL_DEVICE, "cuda:0"), (MCOL_DTYPE, "bfloat16"),
                            (MCOL_MODE, "train"), (MCOL_IDLE, "idle 2 h 17 min"),
                            (MCOL_PINNED, "pinned")):
            # the cell's padding (6 px a side) and the sort arrow's room
            extra = 36 if col in (MCOL_STATE, MCOL_SIZE) else 18
            self.models_view.setColumnWidth(col, max(fm.horizontalAdvance(sample),
                                                     fm.horizontalAdvance(MODEL_COLUMNS[col]) + 12)
                                            + extra)
        outer.addWidget(self.models_view, 1)
        self.models_view.selectionModel().selectionChanged.connect(self._on_model_selected)
        self.no_models_label = QLabel("No models with parameters found in this process.", self)
        self.no_models_label.setObjectName("secondary")
        outer.addWidget(self.no_models_label)

        # Actions on the selected model.
        self.model_bar = QWidget(self)
        mbar = QHBoxLayout(self.model_bar)
        mbar.setContentsMargins(0, 0, 0, 0)
        mbar.setSpacing(8)
        self.unload_cpu_button = QPushButton("Unload to CPU", self.model_bar)
        self.unload_cpu_button.setObjectName("unloadCpuButton")
        self.unload_disk_button = QPushButton("Unload to disk", self.model_bar)
        self.unload_disk_button.setObjectName("unloadDiskButton")
        self.reload_button = QPushButton("Reload", self.model_bar)
        self.reload_button.setObjectName("reloadButton")
        self.pin_button = QPushButton("Pin", self.model_bar)
        self.pin_button.setObjectName("pinButton")
        self.force_button = QPushButton("Unload anyway…", self.model_bar)
        self.force_button.setObjectName("forceUnloadButton")
        self.force_button.setVisible(False)
        self.model_progress = QProgressBar(self.model_bar)
        self.model_progress.setObjectName("modelProgress")
        self.model_progress.setRange(0, 0)  # indeterminate
        self.model_progress.setTextVisible(False)
        self.model_progress.setFixedWidth(90)
        self.model_progress.setFixedHeight(10)
        self.model_progress.setVisible(False)
        self.model_result = QLabel("", self.model_bar)
        self.model_result.setObjectName("modelResult")
        self.model_result.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.model_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for b in (self.unload_cpu_button, self.unload_disk_button, self.reload_button,
                  self.pin_button, self.force_button):
            b.setAutoDefault(False)
            b.setEnabled(False)
            mbar.addWidget(b)
        mbar.addWidget(self.model_progress)
        mbar.addWidget(self.model_result, 1)
        outer.addWidget(self.model_bar)
        self.unload_cpu_button.clicked.connect(lambda: self._request_unload("cpu"))
        self.unload_disk_button.clicked.connect(lambda: self._request_unload("disk"))
        self.reload_button.clicked.connect(self._request_reload)
        self.pin_button.clicked.connect(self._request_pin)
        self.force_button.clicked.connect(self._request_force)
        #: Model actions in flight / the last finished one, by model id (set by the window).
        self._pending: dict[str, object] = {}
        self._last: dict[str, object] = {}
        self._can_act = True
        self._selected_id: str | None = None
        self._bar_key: tuple | None = None
        self.anim_timer = QTimer(self)
        self.anim_timer.setInterval(80)
        self.anim_timer.timeout.connect(self.model_model.tick)

        foot = QHBoxLayout()
        foot.setSpacing(8)
        self.result_label = QLabel("", self)
        self.result_label.setObjectName("actionResult")
        self.result_label.setWordWrap(True)
        self.result_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.gc_button = QPushButton("Run gc", self)
        self.gc_button.setObjectName("gcButton")
        self.gc_button.setToolTip("Run Python's garbage collector in the process (gc.collect())")
        self.free_button = QPushButton("Free cache", self)
        self.free_button.setObjectName("freeCacheButton")
        self.close_button = QPushButton("Close", self)
        self.close_button.clicked.connect(self.close)
        self.free_button.clicked.connect(self._on_free)
        self.gc_button.clicked.connect(self._on_gc)
        for b in (self.gc_button, self.free_button, self.close_button):
            b.setAutoDefault(False)
        foot.addWidget(self.result_label, 1)
        foot.addWidget(self.gc_button)
        foot.addWidget(self.free_button)
        foot.addWidget(self.close_button)
        outer.addLayout(foot)
        self._apply_style()

    # -- public -----------------------------------------------------------------------------
    def set_process(self, pid: int) -> None:
        if pid != self.pid:
            self.pid = pid
            self.report = None
            self._label = f"pid {pid}"
            self.result_label.setText("")
            self.result_label.setToolTip("")
            self._selected_id = None
            self._idle_sent = ...
            self._idle_pending = False
            self.model_model.set_models((), 0.0)

    @property
    def label(self) -> str:
        return self._label

    def update_snapshot(self, snapshot: Snapshot, busy: bool = False, can_act: bool = True,
                        pending: Mapping[str, object] | None = None,
                        last: Mapping[str, object] | None = None,
                        idle_pending: bool = False) -> None:
        """Follow ``snapshot``.  ``pending`` / ``last``: this process's model actions in
        flight and the last finished one, by model id; ``idle_pending``: an idle-timer
        change is in flight."""
        pid = self.pid
        if pid is None:
            return
        report = snapshot.agents.get(pid)
        self.report = report
        procs = [(g, p) for g in snapshot.gpus for p in g.processes if p.pid == pid]
        if procs:
            p = procs[0][1]
            if p.name or p.command:
                self._label = process_label(p)
            command = p.command or p.name or NA
        else:
            command = " ".join(report.argv) if report and report.argv else NA
        self.title_label.setText(self._label)
        self.setWindowTitle(f"{self._label} — details")
        self.command_label.setText(command)
        self.command_label.setToolTip(command)

        f = self.facts
        f["PID"].setText(str(pid))
        if report is None:
            for name in ("Python", "PyTorch", "Allocator", "CUDA", "OOMs", "Alloc retries"):
                f[name].setText(NA)
            f["Agent"].setText("not reporting (the process or its agent has gone)")
        else:
            f["Python"].setText(report.python or NA)
            f["PyTorch"].setText(report.torch or report.torch_status)
            f["Allocator"].setText(report.allocator_backend or NA)
            f["CUDA"].setText(_yes_no(report.cuda_initialized, "initialised", "not initialised"))
            ooms = report.oom_events
            if ooms is None:
                ooms = _sum_known(d.num_ooms for d in report.devices)
            f["OOMs"].setText(NA if ooms is None else str(ooms))
            retries = _sum_known(d.num_alloc_retries for d in report.devices)
            f["Alloc retries"].setText(NA if retries is None else str(retries))
            agent = "reporting"
            if report.round_trip_s is not None:
                ms = report.round_trip_s * 1000
                agent += f", {ms:.1f} ms round trip" if ms < 10 else f", {ms:.0f} ms round trip"
            f["Agent"].setText(agent)
        errors = report.errors if report else ()
        self.errors_label.setVisible(bool(errors))
        if errors:
            self.errors_label.setText("⚠ " + "\n⚠ ".join(errors))

        # Breakdown per GPU the process is on.
        rows = []
        if report is not None:
            for g, p in procs:
                rows.append((g, p, breakdown_of(report, g.index, p.gpu_memory, g.uuid)))
        scale = max((bar_total(b) for _, _, b in rows), default=0)
        while len(self.gpu_rows) < len(rows):
            row = BreakdownRow(self, name_width=150)
            self.gpu_rows_box.addWidget(row)
            self.gpu_rows.append(row)
        cache = None
        for row, (g, p, b) in zip(self.gpu_rows, rows):
            dev = report.device_for_gpu(g.index, g.uuid) if report else None
            tip = breakdown_tooltip(f"GPU {g.display_id}: {g.name}", b)
            if dev is not None:
                tip += (f"\n\nPeak allocated: {fmt_bytes(dev.peak_allocated, 2)}"
                        f"\nPeak reserved: {fmt_bytes(dev.peak_reserved, 2)}"
                        f"\nInactive split (fragmented): {fmt_bytes(dev.inactive_split, 2)}"
                        f"\nAlloc retries: {NA if dev.num_alloc_retries is None else dev.num_alloc_retries}"
                        f"\nOOMs: {NA if dev.num_ooms is None else dev.num_ooms}")
            row.set(pid, f"GPU {g.display_id}", b, scale, tip)
            row.setVisible(True)
            if b.cache is not None:
                cache = (cache or 0) + b.cache
        for row in self.gpu_rows[len(rows):]:
            row.setVisible(False)
        self.no_gpu_label.setVisible(not rows)
        if report is not None and not rows:
            # Not on a GPU in this sample: the allocator's own figures still say what is cached.
            cache = _sum_known(d.cache for d in report.devices)
        self.cache_total = cache

        models = report.models if report else ()
        # "Last used" against the agent's own clock at the report (same host clock).
        now = report.received_at if report is not None and report.received_at else snapshot.timestamp
        self._pending = dict(pending or {})
        self._last = dict(last or {})
        self._can_act = can_act
        self.model_model.set_models(models, now, self._pending)
        self._reselect()
        self.models_title.setText(f"Models ({len(models)})" if models else "Models")
        self.models_view.setVisible(bool(models))
        self.model_bar.setVisible(bool(models))
        self.no_models_label.setVisible(not models)
        moving = bool(self.model_model.moving_rows())
        if moving and not self.anim_timer.isActive():
            self.anim_timer.start()
        elif not moving and self.anim_timer.isActive():
            self.anim_timer.stop()
        self._update_model_bar()
        self._update_idle(report, idle_pending)

        self.free_button.setText(free_button_text(cache, busy, all_=False))
        self.free_button.setEnabled(bool(cache) and report is not None and can_act and not busy)
        if busy:
            self.free_button.setToolTip("Freeing the cache…")
        elif report is None:
            self.free_button.setToolTip("The agent is not reporting")
        elif not can_act:
            self.free_button.setToolTip("Agent actions are not available")
        elif not cache:
            self.free_button.setToolTip("Nothing to free: the allocator holds no unused memory")
        else:
            self.free_button.setToolTip(
                f"gc.collect() + torch.cuda.empty_cache() in the process: returns about "
                f"{fmt_bytes(cache)} of cached memory to the driver")
        self.gc_button.setEnabled(report is not None and can_act and not busy)

    def show_result(self, text: str, tooltip: str = "", error: bool = False) -> None:
        self.result_label.setText(text)
        self.result_label.setToolTip(tooltip or text)
        color = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL] if error else pal.hex_color(
            pal.foreground(self.palette()))
        self.result_label.setStyleSheet(f"color: {color};")

    # -- models --------------------------------------------------------------------------------
    def selected_model(self) -> ModelInfo | None:
        if self._selected_id is None:
            return None
        row = self.model_model.row_of(self._selected_id)
        return self.model_model.model_at(row)

    def select_model(self, model_id: str) -> bool:
        row = self.model_model.row_of(model_id)
        if row < 0:
            return False
        self._selected_id = model_id
        self._reselect()
        self._update_model_bar()
        return True

    def _reselect(self) -> None:
        """Keep the selected model selected across model resets and re-sorts."""
        view = self.models_view
        sel = view.selectionModel()
        if self._selected_id is None:
            if self.model_model.rowCount() and not sel.hasSelection():
                # The first row as the view shows it (largest model).
                self._selected_id = self.model_proxy.index(0, 0).data(MODEL_ID_ROLE)
            else:
                return
        row = self.model_model.row_of(self._selected_id)
        if row < 0:
            self._selected_id = None
            return
        proxy_index = self.model_proxy.mapFromSource(self.model_model.index(row, 0))
        current = sel.selectedRows()
        if len(current) == 1 and current[0].row() == proxy_index.row():
            return
        sel.blockSignals(True)
        view.selectRow(proxy_index.row())
        sel.blockSignals(False)
        view.viewport().update()

    def _on_model_selected(self, *_args) -> None:
        rows = self.models_view.selectionModel().selectedRows()
        if rows:
            self._selected_id = rows[0].data(MODEL_ID_ROLE)
        self._update_model_bar()

    def _update_model_bar(self) -> None:
        m = self.selected_model()
        buttons = (self.unload_cpu_button, self.unload_disk_button, self.reload_button,
                   self.pin_button)
        if m is None:
            self._bar_key = None
            for b in buttons:
                b.setEnabled(False)
            self.force_button.setVisible(False)
            self.model_progress.setVisible(False)
            self._set_model_result("Select a model to unload, reload or pin it.", muted=True)
            return
        pending = self._pending.get(m.id)
        last = self._last.get(m.id)
        live = self.report is not None and self._can_act
        # Per snapshot this usually changes nothing: skip the widget calls then.
        key = (m, id(pending), id(last), getattr(last, "measured", None), live)
        if key == self._bar_key:
            return
        self._bar_key = key
        moving = is_moving(m, pending)
        busy = moving or pending is not None
        self.model_progress.setVisible(busy)
        resident = m.state == "resident"
        # The agent refuses any unload of a model with an unload blocker: no button for it.
        unloadable = resident and not m.unload_blocker
        self.unload_cpu_button.setEnabled(live and not busy and unloadable)
        self.unload_disk_button.setEnabled(live and not busy and unloadable)
        self.reload_button.setEnabled(live and not busy and m.state == "offloaded")
        self.pin_button.setText("Unpin" if m.pinned else "Pin")
        self.pin_button.setEnabled(live and not busy)
        size = fmt_bytes(model_size(m))
        if m.unload_blocker:
            refused = f"The agent refuses any unload of {m.name}: {m.unload_blocker}"
            self.unload_cpu_button.setToolTip(refused)
            self.unload_disk_button.setToolTip(refused)
        else:
            self.unload_cpu_button.setToolTip(
                f"Move {m.name}'s weights ({size}) to pinned host memory and release the GPU "
                "memory; the next forward pass reloads them (fast)")
            self.unload_disk_button.setToolTip(
                f"Write {m.name}'s weights ({size}) to a file on disk and release the GPU "
                "memory; frees host memory too, slower to reload")
        self.reload_button.setToolTip(f"Bring {m.name}'s weights back to {model_device(m)} now "
                                      "(instead of at the next forward pass)")
        self.pin_button.setToolTip("Pinned models are never unloaded automatically (by the "
                                   "idle timer or the memory-pressure policy)"
                                   if not m.pinned else "Allow automatic unloading again")
        can_force = (last is not None and getattr(last, "can_force", False) and resident
                     and not busy and live)
        self.force_button.setVisible(bool(can_force))
        self.force_button.setEnabled(bool(can_force))
        if pending is not None:
            self._set_model_result(pending.summary(with_process=False))
        elif moving:
            self._set_model_result(f"{state_text(m)} {m.name}")
        elif last is not None:
            text = last.summary(with_process=False)
            if getattr(last, "refused", False):
                text = f"Refused: {last.error}"
                if can_force:
                    text += " — you can override it"
            self._set_model_result(text, error=not last.ok, tooltip=last.summary())
        elif note := model_note(m):
            self._set_model_result(note, muted=True, tooltip=model_blocker_tooltip(m))
        else:
            self._set_model_result("", muted=True)

    def _set_model_result(self, text: str, error: bool = False, muted: bool = False,
                          tooltip: str = "") -> None:
        label = self.model_result
        if label.text() != text:
            label.setText(text)
        if label.toolTip() != (tooltip or text):
            label.setToolTip(tooltip or text)
        if error:
            color = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        elif muted:
            color = pal.hex_color(pal.muted(self.palette()))
        else:
            color = pal.hex_color(pal.foreground(self.palette()))
        style = f"color: {color};"
        if label.styleSheet() != style:
            label.setStyleSheet(style)

    def _request(self, kind: str, **kw) -> None:
        m = self.selected_model()
        if m is None or self.pid is None:
            return
        req = {"kind": kind, "pid": self.pid, "model": m.id, "name": m.name,
               "size": model_size(m), "device": m.home_device or m.device, "to": "cpu",
               "force": False, "pinned": None}
        req.update(kw)
        self.model_action_requested.emit(req)

    def _request_unload(self, to: str) -> None:
        self._request(UNLOAD, to=to)

    def _request_reload(self) -> None:
        self._request(RELOAD)

    def _request_pin(self) -> None:
        m = self.selected_model()
        if m is not None:
            self._request(PIN, pinned=not m.pinned)

    def _request_force(self) -> None:
        m = self.selected_model()
        last = self._last.get(m.id) if m is not None else None
        if m is None or last is None or not getattr(last, "can_force", False):
            return
        to = getattr(last, "to", "cpu")
        answer = QMessageBox.warning(
            self, "Unload anyway?", force_consequences(last.error or "refused", m.name, to),
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        if answer == QMessageBox.StandardButton.Yes:
            self._request(UNLOAD, to=to, force=True)

    # -- idle timer ---------------------------------------------------------------------------
    def _update_idle(self, report: AgentReport | None, pending: bool) -> None:
        self._idle_pending = pending
        can = report is not None and self._can_act
        self.idle_box.setEnabled(can and not pending)
        current = report.idle_unload_s if report is not None else None
        if report is None:
            self.idle_state.setText("")
        elif pending:
            self.idle_state.setText("setting…")
        else:
            self.idle_state.setText("(agent: off)" if current is None
                                    else f"(agent: {current / 60:g} min)")
        # Follow the agent's value, unless the user is typing or a change is on its way.
        if report is not None and not pending and not self.idle_spin.hasFocus():
            self.idle_box.blockSignals(True)
            self.idle_spin.blockSignals(True)
            self.idle_box.setChecked(current is not None)
            if current is not None:
                self.idle_spin.setValue(max(1, round(current / 60)))
            self.idle_box.blockSignals(False)
            self.idle_spin.blockSignals(False)
            self._idle_sent = current
        self.idle_spin.setEnabled(can and not pending and self.idle_box.isChecked())

    def idle_seconds_wanted(self) -> float | None:
        return float(self.idle_spin.value() * 60) if self.idle_box.isChecked() else None

    def _on_idle_toggled(self, _checked: bool) -> None:
        self.idle_spin.setEnabled(self.idle_box.isChecked())
        self._send_idle()

    def _on_idle_minutes(self, _value: int) -> None:
        if self.idle_box.isChecked():
            self._send_idle()

    def _send_idle(self) -> None:
        if self.pid is None or self.report is None:
            return
        wanted = self.idle_seconds_wanted()
        if wanted == self._idle_sent:
            return
        self._idle_sent = wanted
        self.idle_state.setText("setting…")
        self.idle_unload_requested.emit(self.pid, wanted)

    # -- internals -----------------------------------------------------------------------------
    def _on_free(self) -> None:
        if self.pid is not None:
            self.free_requested.emit(self.pid)

    def _on_gc(self) -> None:
        if self.pid is not None:
            self.gc_requested.emit(self.pid)

    def changeEvent(self, event) -> None:  # noqa: N802
        from PySide6.QtCore import QEvent

        if event.type() == QEvent.Type.PaletteChange:
            self._apply_style()
        super().changeEvent(event)

    def _apply_style(self) -> None:
        border = pal.hex_color(pal.faint(self.palette()))
        warn = pal.LEVEL_COLORS[pal.LEVEL_WARNING]
        self.setStyleSheet(
            f"QFrame#detailRule {{ color: {border}; }}"
            "QTableView#modelTable::item { padding: 0px 6px; }"
            + pal.view_rules(self.palette(), "modelTable"))
        self.errors_label.setStyleSheet(f"color: {warn};")


__all__ = ["ModelListModel", "ProcessDetailView"]
