"""The tray icon: the fullest GPU at a glance, and the few actions that matter.

The icon is drawn live: a ring whose arc is the fullest GPU's used / total,
coloured by level (the gauges' colours: blue, orange from 75 %, vermillion
from 90 %), grey and empty when no figure is known.  The tooltip lists every
GPU; the menu has a line per GPU, then the actions.  The icon is redrawn only
when what it shows changes (whole percent, level), not on every sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, QRectF, Qt, Signal
from PySide6.QtGui import QAction, QColor, QIcon, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app import APP_NAME
from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.units import fmt_bytes
from app.ui.style import palette as pal

ICON_SIZES = (16, 22, 24, 32, 48, 64)
TRACK = "#7F7F7F"
FREE_ALL = "Free all"
FREE_ALL_TIP = ("gc.collect() + torch.cuda.empty_cache() in every process with an agent, and "
                "an unload of every model server's model that is not generating (through the "
                "server's own API)")


def free_all_text(processes: int, server_models: int) -> str:
    """"Free all (2 processes, 3 server models)"."""
    parts = []
    if processes:
        parts.append(f"{processes} process{'es' if processes != 1 else ''}")
    if server_models:
        parts.append(f"{server_models} server model{'s' if server_models != 1 else ''}")
    return FREE_ALL + (f" ({', '.join(parts)})" if parts else "")


@dataclass(frozen=True, slots=True)
class TrayState:
    """What the icon shows: the fullest GPU's fraction (None: unknown) and its level."""

    fraction: float | None
    level: str

    @property
    def percent(self) -> int | None:
        return None if self.fraction is None else int(round(self.fraction * 100))


def fullest(snapshot: Snapshot | None) -> TrayState:
    fractions = [g.memory_fraction for g in (snapshot.gpus if snapshot else ())
                 if g.state is DeviceState.OK and g.memory_fraction is not None]
    if not fractions:
        return TrayState(None, pal.LEVEL_UNKNOWN)
    top = max(fractions)
    return TrayState(top, pal.level_for(top))


def gpu_line(gpu: GpuSample) -> str:
    """``GPU 0 · RTX 4090 · 21.3 / 24.0 GiB (89 %)``; states other than OK are named."""
    name = gpu.name.removeprefix("NVIDIA ").removeprefix("GeForce ")
    head = f"GPU {gpu.display_id} · {name}"
    if gpu.state is not DeviceState.OK:
        return f"{head} · {gpu.state.value.replace('_', ' ')}"
    if gpu.memory_used is None or gpu.memory_total is None:
        return f"{head} · memory n/a"
    frac = gpu.memory_fraction
    pct = f" ({frac * 100:.0f} %)" if frac is not None else ""
    return f"{head} · {fmt_bytes(gpu.memory_used)} / {fmt_bytes(gpu.memory_total)}{pct}"


def render_ring(state: TrayState, size: int) -> QImage:
    """One square icon image: track ring, arc for the used fraction, a dot when critical."""
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    width = max(2.0, size * 0.18)
    inset = width / 2 + max(0.5, size * 0.03)
    rect = QRectF(inset, inset, size - 2 * inset, size - 2 * inset)
    track = QPen(QColor(TRACK), width)
    track.setColor(QColor(127, 127, 127, 110))
    p.setPen(track)
    p.drawEllipse(rect)
    if state.fraction is not None:
        color = pal.level_color(state.level)
        pen = QPen(color, width)
        pen.setCapStyle(Qt.PenCapStyle.FlatCap)
        p.setPen(pen)
        span = -int(round(min(1.0, max(0.0, state.fraction)) * 360 * 16))
        if span:
            p.drawArc(rect, 90 * 16, span)  # clockwise from 12 o'clock
        if state.level == pal.LEVEL_CRITICAL:
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(color)
            r = size * 0.17
            p.drawEllipse(QRectF(size / 2 - r, size / 2 - r, 2 * r, 2 * r))
    p.end()
    return image


def tray_icon(state: TrayState) -> QIcon:
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addPixmap(QPixmap.fromImage(render_ring(state, size)))
    return icon


class TrayController(QObject):
    """Owns the QSystemTrayIcon and its menu; says what the user asked for through signals."""

    show_window_requested = Signal()
    #: "Free all": every agent's cache, and every server model not generating.
    free_all_requested = Signal()
    unload_idle_requested = Signal()
    pause_alerts_requested = Signal(bool)  # True: pause for an hour, False: resume
    quit_requested = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.icon = QSystemTrayIcon(parent)
        self.state: TrayState | None = None
        self.menu = QMenu()
        self.menu.setObjectName("trayMenu")
        self._gpu_actions: dict[str, QAction] = {}
        self._gpu_end = self.menu.addSeparator()
        self.free_action = self.menu.addAction(FREE_ALL)
        self.free_action.setToolTip(FREE_ALL_TIP)
        self.free_action.triggered.connect(self.free_all_requested)
        self.unload_action = self.menu.addAction("Unload idle models")
        self.unload_action.triggered.connect(self.unload_idle_requested)
        self.menu.addSeparator()
        self.show_action = self.menu.addAction("Show window")
        self.show_action.triggered.connect(self.show_window_requested)
        self.pause_action = self.menu.addAction("Pause alerts for 1 h")
        self.pause_action.setCheckable(True)
        self.pause_action.toggled.connect(self.pause_alerts_requested)
        self.menu.addSeparator()
        self.quit_action = self.menu.addAction("Quit")
        self.quit_action.triggered.connect(self.quit_requested)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._on_activated)
        self.set_agent_actions(0, 0)
        self.update(None)

    # -- state ---------------------------------------------------------------------------
    def update(self, snapshot: Snapshot | None) -> None:
        state = fullest(snapshot)
        if state.percent != (self.state.percent if self.state else -1) or (
                self.state is None or state.level != self.state.level):
            self.state = state
            self.icon.setIcon(tray_icon(state))
        gpus = list(snapshot.gpus) if snapshot else []
        lines = [gpu_line(g) for g in gpus]
        why = (snapshot.error if snapshot else None) or "No GPU data"
        self.icon.setToolTip("\n".join([APP_NAME, *lines]) if lines else f"{APP_NAME}\n{why}")
        self._set_gpu_lines([(g.display_id, line) for g, line in zip(gpus, lines, strict=True)])

    def _set_gpu_lines(self, lines: list[tuple[str, str]]) -> None:
        ids = [did for did, _ in lines]
        if ids != list(self._gpu_actions):
            for action in self._gpu_actions.values():
                self.menu.removeAction(action)
            self._gpu_actions = {}
            for did, _ in lines:
                action = QAction("", self.menu)
                action.setEnabled(False)  # information, not a command
                self.menu.insertAction(self._gpu_end, action)
                self._gpu_actions[did] = action
        for did, text in lines:
            if self._gpu_actions[did].text() != text:
                self._gpu_actions[did].setText(text)

    def set_agent_actions(self, processes: int, idle_models: int, server_models: int = 0
                          ) -> None:
        """Enable "Free all" / "Unload idle models" only when there is something to do;
        "Free all" counts the processes whose cache it frees and the server models it
        unloads."""
        self.free_action.setEnabled(processes > 0 or server_models > 0)
        self.free_action.setText(free_all_text(processes, server_models))
        self.unload_action.setEnabled(idle_models > 0)
        self.unload_action.setText("Unload idle models" + (f" ({idle_models})"
                                                           if idle_models else ""))

    def set_paused(self, paused: bool) -> None:
        if self.pause_action.isChecked() != paused:
            self.pause_action.blockSignals(True)
            self.pause_action.setChecked(paused)
            self.pause_action.blockSignals(False)

    def gpu_lines(self) -> list[str]:
        return [a.text() for a in self._gpu_actions.values()]

    # -- showing ---------------------------------------------------------------------------
    def show(self) -> None:
        self.icon.show()

    def hide(self) -> None:
        self.icon.hide()

    def message(self, title: str, body: str, critical: bool = False,
                timeout_ms: int = 10000) -> None:
        kind = (QSystemTrayIcon.MessageIcon.Warning if critical
                else QSystemTrayIcon.MessageIcon.Information)
        self.icon.showMessage(title, body, kind, timeout_ms)

    def _on_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger,
                      QSystemTrayIcon.ActivationReason.DoubleClick):
            self.show_window_requested.emit()


__all__ = ["TrayController", "TrayState", "free_all_text", "fullest", "gpu_line", "render_ring",
           "tray_icon"]
