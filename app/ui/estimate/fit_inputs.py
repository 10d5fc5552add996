"""The "Will it fit?" form: the model, the step and the GPU to fit on.

Its values are a :class:`~app.ui.estimate.fit_command.FitChoice` and a
:class:`~app.ui.estimate.fit_command.GpuTarget`; ``changed`` fires on every
edit (the dialog cancels an estimate of the old inputs).  A GGUF file is an
LLM read by formula: its context is asked, the fields it has no use for are
off; a sequence length and an image size exclude each other.  No file is read
here: the estimate reads the model in its own process.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLayout,
    QLineEdit,
    QMenu,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.core.estimate.types import DTYPES, OPTIMIZERS
from app.ui.estimate.fit_command import FitChoice, GpuTarget
from app.ui.style.text import plain_tip

#: Shown in a number field left at its lowest value: the command's default.
DEFAULT_TEXT = "default"
OFF_TEXT = "off"
AUTOCASTS = ("bfloat16", "float16")
MODEL_TIP = ("A Hugging Face model folder or its config.json, a diffusers component folder, "
             "a GGUF file, or package.module:function returning (module, example batch)")


def _number(parent: QWidget, lowest: int, highest: int, special: str | None, tip: str,
            value: int | None = None) -> QSpinBox:
    box = QSpinBox(parent)
    box.setRange(lowest, highest)
    if special is not None:
        box.setSpecialValueText(special)  # the lowest value reads as this word
    box.setValue(lowest if value is None else value)
    box.setToolTip(tip)
    box.setAccelerated(True)
    return box


class FitInputs(QWidget):
    """The form (see the module's docstring)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fitInputs")
        grid = self.grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(6)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)

        self.model_edit = QLineEdit(self)
        self.model_edit.setObjectName("fitModel")
        self.model_edit.setPlaceholderText("model folder, config.json, .gguf or module:function")
        self.model_edit.setToolTip(MODEL_TIP)
        self.model_edit.setClearButtonEnabled(True)
        self.browse_button = QToolButton(self)
        self.browse_button.setText("Browse…")
        self.browse_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.browse_button)
        menu.addAction("A model folder…", self._browse_folder)
        menu.addAction("A config.json or .gguf file…", self._browse_file)
        self.browse_button.setMenu(menu)
        self.browse_button.setStyleSheet("QToolButton::menu-indicator { image: none; }")
        model_row = QHBoxLayout()
        model_row.setSpacing(6)
        model_row.addWidget(self.model_edit, 1)
        model_row.addWidget(self.browse_button)
        self._row(0, "Model", model_row)

        self.batch = _number(self, 1, 1 << 20, None, "Samples per step", 1)
        self.seq = _number(self, 0, 1 << 22, DEFAULT_TEXT,
                           "Tokens per sample (text models); default: the model's own", 0)
        self.image = _number(self, 0, 1 << 14, DEFAULT_TEXT,
                             "Image side in pixels (vision models, UNets); default: the "
                             "model's own", 0)
        self.context = _number(self, 0, 1 << 22, OFF_TEXT,
                               "An LLM's context length: weights plus the KV cache by "
                               "formula, with a table of the usual lengths", 0)
        self.context.setSingleStep(1024)
        self.dtype = QComboBox(self)
        self.dtype.addItems(list(DTYPES))
        self.dtype.setToolTip("The weights' dtype")
        self.autocast = QComboBox(self)
        self.autocast.addItems([OFF_TEXT, *AUTOCASTS])
        self.autocast.setToolTip("Mixed precision over float32 weights (torch.autocast)")
        self.mode = QComboBox(self)
        self.mode.addItems(["Inference", "Training"])
        self.mode.setToolTip("Inference: one forward pass.  Training: forward, backward "
                             "and the optimizer's step")
        self.optimizer = QComboBox(self)
        self.optimizer.addItems(list(OPTIMIZERS))
        self.optimizer.setToolTip("The training step's optimizer")
        self.lora = _number(self, 0, 4096, OFF_TEXT, "Train LoRA adapters of this rank, the "
                            "model frozen", 0)
        self.checkpointing = QCheckBox("Checkpointing", self)
        self.checkpointing.setToolTip("Gradient checkpointing: recompute activations in "
                                      "the backward pass instead of keeping them")
        self.gpu = QComboBox(self)
        self.gpu.setObjectName("fitGpu")
        self.gpu.setToolTip("The GPU whose free memory now the step is fitted against")
        # Its entries are long ("GPU 0 on gpu1 · … · 61.2 GiB free"): they elide, the
        # list shows them whole.
        self.gpu.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.gpu.setMinimumContentsLength(16)
        self.max_batch = QCheckBox("Largest batch", self)
        self.max_batch.setToolTip("Also search for the largest batch that fits this GPU now "
                                  "(several estimates: takes longer)")

        for row, (left, lw, right, rw) in enumerate((
                ("Batch", self.batch, "Mode", self.mode),
                ("Sequence", self.seq, "Optimizer", self.optimizer),
                ("Image size", self.image, "LoRA rank", self.lora),
                ("Context", self.context, "", self.checkpointing),
                ("Weights", self.dtype, "Autocast", self.autocast)), start=1):
            self._row(row, left, lw, 0)
            self._row(row, right, rw, 2)
        grid.addWidget(QLabel("GPU", self), 6, 0)
        grid.addWidget(self.gpu, 6, 1, 1, 2)
        grid.addWidget(self.max_batch, 6, 3)
        self.targets: list[GpuTarget] = []

        self.model_edit.textChanged.connect(self._on_edit)
        for box in (self.batch, self.seq, self.image, self.context, self.lora):
            box.valueChanged.connect(self._on_edit)
        for combo in (self.dtype, self.autocast, self.mode, self.optimizer, self.gpu):
            combo.currentIndexChanged.connect(self._on_edit)
        for check in (self.checkpointing, self.max_batch):
            check.toggled.connect(self._on_edit)
        self._enable()

    def _row(self, row: int, caption: str, field: QWidget | QLayout, col: int = 0) -> None:
        if caption:
            label = QLabel(caption, self)
            self.grid.addWidget(label, row, col)
        if isinstance(field, QWidget):
            self.grid.addWidget(field, row, col + 1)
        else:  # the model's row: across the form
            self.grid.addLayout(field, row, col + 1, 1, 3)

    # -- values ---------------------------------------------------------------------------------
    def is_gguf(self) -> bool:
        return self.model_edit.text().strip().lower().endswith(".gguf")

    def training(self) -> bool:
        return self.mode.currentIndex() == 1 and not self.is_gguf()

    def choice(self) -> FitChoice | None:
        """The inputs as asked; None until a model is named."""
        model = self.model_edit.text().strip()
        if not model:
            return None
        gguf, train = self.is_gguf(), self.training()
        autocast = self.autocast.currentText()
        return FitChoice(
            model=model, batch=self.batch.value(),
            seq=None if gguf or not self.seq.value() else self.seq.value(),
            image=None if gguf or self.seq.value() or not self.image.value()
            else self.image.value(),
            context=None if train or not self.context.value() else self.context.value(),
            dtype=self.dtype.currentText(),
            autocast=None if gguf or autocast == OFF_TEXT else autocast,
            train=train, optimizer=self.optimizer.currentText(),
            checkpointing=train and self.checkpointing.isChecked(),
            lora_rank=(self.lora.value() or None) if train else None,
            max_batch=self.max_batch.isChecked())

    def target(self) -> GpuTarget | None:
        i = self.gpu.currentIndex()
        return self.targets[i] if 0 <= i < len(self.targets) else None

    def set_targets(self, targets: Sequence[GpuTarget], select: str | None = None) -> None:
        """The GPUs to offer; ``select`` (a display id), else the one chosen before."""
        before = self.target()
        keep = select if select is not None else (
            before.display_id if before is not None else None)
        self.gpu.blockSignals(True)
        self.gpu.clear()
        self.targets = list(targets)
        for t in self.targets:
            self.gpu.addItem(t.label or t.display_id)
            self.gpu.setItemData(self.gpu.count() - 1, plain_tip(t.label),
                                 Qt.ItemDataRole.ToolTipRole)
        if not self.targets:
            self.gpu.addItem("No GPU known: the estimate only")
        ids = [t.display_id for t in self.targets]
        self.gpu.setCurrentIndex(ids.index(keep) if keep in ids else 0)
        self.gpu.blockSignals(False)

    def select_gpu(self, display_id: str | None) -> bool:
        ids = [t.display_id for t in self.targets]
        if display_id in ids:
            self.gpu.setCurrentIndex(ids.index(display_id))
            return True
        return False

    def set_model(self, model: str) -> None:
        self.model_edit.setText(model)

    # -- reactions ------------------------------------------------------------------------------
    def _on_edit(self, *_args: object) -> None:
        self._enable()
        self.changed.emit()

    def _enable(self) -> None:
        """Fields with no use for these inputs are off (kept, not cleared)."""
        gguf, train = self.is_gguf(), self.training()
        self.mode.setEnabled(not gguf)
        self.autocast.setEnabled(not gguf)
        # A text model's sequence or an image model's size: one of them is given.
        self.seq.setEnabled(not gguf and not self.image.value())
        self.image.setEnabled(not gguf and not self.seq.value())
        for w in (self.optimizer, self.lora, self.checkpointing):
            w.setEnabled(train)
        self.context.setEnabled(not train)

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "A model folder", self._start_dir())
        if path:
            self.set_model(path)

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "A model's config.json or a GGUF file", self._start_dir(),
            "Model files (config.json *.json *.gguf);;All files (*)")
        if path:
            self.set_model(path)

    def _start_dir(self) -> str:
        text = self.model_edit.text().strip()
        return text if text and ":" not in text else ""


__all__ = ["FitInputs"]
