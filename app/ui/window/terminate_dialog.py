"""The confirmation before a process is terminated: what it is, the VRAM it
holds and where, whether unsaved work in its models would be lost, and how it
is stopped.  Cancel is the default: Enter never kills a process.

The dialog is opened window-modal with ``open()`` (never ``exec()``): the
caller connects ``accepted``, and tests press a button without a nested loop.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.naming import process_label
from app.core.monitor.samples import Snapshot
from app.core.units import NA, fmt_bytes
from app.ui.style.text import plain_label


def _seconds(value: float) -> str:
    return f"{value:g} s"


def confirm_text(snapshot: Snapshot | None, pid: int, grace_s: float, host: str = "") -> str:
    """The dialog's text for process ``pid`` as ``snapshot`` (its host's) shows it;
    ``host``: the remote host it runs on ("" this machine)."""
    rows = [(g.display_id, p) for g in (snapshot.gpus if snapshot else ()) for p in g.processes
            if p.pid == pid]
    first = rows[0][1] if rows else None
    label = process_label(first) if first is not None and (first.name or first.command) \
        else f"pid {pid}"
    lines = [f"Terminate {label} on {host}?" if host else f"Terminate {label}?", ""]
    if first is not None and first.command:
        lines.append(f"Command: {first.command}")
    vram = ", ".join(f"{fmt_bytes(p.gpu_memory)} on GPU {did}" for did, p in rows)
    lines.append(f"VRAM: {vram or NA}")
    report = snapshot.agents.get(pid) if snapshot is not None else None
    models = tuple(getattr(report, "models", ()) or ())
    if report is not None:
        lines.append("")
        if models:
            names = ", ".join(m.name for m in models[:3]) + (", …" if len(models) > 3 else "")
            count = f"{len(models)} model{'s' if len(models) != 1 else ''}"
            lines.append(f"It has a VRAM Steward agent with {count} ({names}): "
                         "unsaved work in it is lost.")
        else:
            lines.append("It has a VRAM Steward agent: unsaved work in it is lost.")
    by = f" ({host}'s VRAM Steward server sends the signals)" if host else ""
    lines += ["", f"Terminate asks it to stop (SIGTERM); if it is still running after "
              f"{_seconds(grace_s)}, kills it (SIGKILL){by}."]
    return "\n".join(lines)


class TerminateDialog(QDialog):
    """"Terminate" / "Cancel" (the default) under :func:`confirm_text`."""

    def __init__(self, text: str, parent: QWidget | None = None, host: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("terminateDialog")
        self.setWindowTitle(f"Terminate a process on {host}" if host else "Terminate process")
        self.setModal(True)
        icon = QLabel(self)
        size = self.style().pixelMetric(QStyle.PixelMetric.PM_MessageBoxIconSize)
        icon.setPixmap(self.style().standardIcon(
            QStyle.StandardPixmap.SP_MessageBoxWarning).pixmap(size, size))
        self.text_label = plain_label(QLabel(text, self))  # names the process and its models
        self.text_label.setObjectName("terminateText")
        self.text_label.setWordWrap(True)
        self.text_label.setMinimumWidth(self.fontMetrics().horizontalAdvance("0" * 56))
        top = QHBoxLayout()
        top.addWidget(icon, 0)
        top.addWidget(self.text_label, 1)
        buttons = QDialogButtonBox(self)
        self.terminate_button = buttons.addButton("Terminate",
                                                  QDialogButtonBox.ButtonRole.AcceptRole)
        self.terminate_button.setObjectName("confirmTerminateButton")
        self.cancel_button = buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.terminate_button.setAutoDefault(False)
        self.cancel_button.setDefault(True)
        self.cancel_button.setFocus()
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(buttons)


__all__ = ["TerminateDialog", "confirm_text"]
