"""The tray icon: the fullest GPU at a glance, and the few actions that matter.

The icon is drawn live: a ring whose arc is the fullest GPU's used / total,
coloured by level (the gauges' colours: blue, orange from 75 %, vermillion
from 90 %), grey and empty when no figure is known.  The fullest GPU is that
of any host with current figures (a disconnected host's last ones are not);
with remote hosts the tooltip names it ("Fullest: gpu1 · GPU 2: 91 %").  The
tooltip lists every GPU (a remote one with its host; a host that is not
connected as one line saying so); the menu has the same lines, then the
actions.  The icon is redrawn only when what it shows changes (whole
percent, level), not on every sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, QRectF, Qt, Signal
from PySide6.QtGui import QAction, QColor, QIcon, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app import APP_NAME
from app.core.monitor.hosts import live_gpus, split_id
from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.units import fmt_bytes
from app.ui.style import palette as pal
from app.ui.style.hosts import state_text

ICON_SIZES = (16, 22, 24, 32, 48, 64)
TRACK = "#7F7F7F"
FREE_ALL = "Free all"
#: Past this many GPU lines, each remote host is one line (its fullest GPU).
MAX_GPU_LINES = 16
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
    """What the icon shows: the fullest GPU's fraction (None: unknown) and its
    level; ``where`` names that GPU ("GPU 0", "gpu1 · GPU 2")."""

    fraction: float | None
    level: str
    where: str = ""

    @property
    def percent(self) -> int | None:
        return None if self.fraction is None else int(round(self.fraction * 100))


def fullest(snapshot: Snapshot | None) -> TrayState:
    """The fullest GPU of any host with current figures."""
    known = [g for _host, g in live_gpus(snapshot)
             if g.state is DeviceState.OK and g.memory_fraction is not None]
    if not known:
        return TrayState(None, pal.LEVEL_UNKNOWN)
    top = max(known, key=lambda g: g.memory_fraction or 0.0)
    fraction = top.memory_fraction or 0.0
    return TrayState(fraction, pal.level_for(fraction), gpu_name(top))


def gpu_name(gpu: GpuSample) -> str:
    """"GPU 0" here, "gpu1 · GPU 0" on a remote host."""
    own = f"GPU {split_id(gpu.display_id)[1]}"
    return f"{gpu.host} · {own}" if gpu.host else own


def gpu_line(gpu: GpuSample) -> str:
    """``GPU 0 · RTX 4090 · 21.3 / 24.0 GiB (89 %)`` (``gpu1 · GPU 0 · …`` on a
    remote host); states other than OK are named."""
    name = gpu.name.removeprefix("NVIDIA ").removeprefix("GeForce ")
    head = f"{gpu_name(gpu)} · {name}"
    if gpu.state is not DeviceState.OK:
        return f"{head} · {gpu.state.value.replace('_', ' ')}"
    if gpu.memory_used is None or gpu.memory_total is None:
        return f"{head} · memory n/a"
    frac = gpu.memory_fraction
    pct = f" ({frac * 100:.0f} %)" if frac is not None else ""
    return f"{head} · {fmt_bytes(gpu.memory_used)} / {fmt_bytes(gpu.memory_total)}{pct}"


def tray_lines(snapshot: Snapshot | None) -> list[tuple[str, str]]:
    """(key, text) of the tooltip's and menu's lines: this machine's GPUs, then
    each remote host's with current figures, or one line for a host that is
    not connected (its last figures are not now's).  Past ``MAX_GPU_LINES``
    GPUs, a remote host is one line: its fullest GPU."""
    if snapshot is None:
        return []
    lines = [(g.display_id, gpu_line(g)) for g in snapshot.gpus]
    live = sum(len(v.snapshot.gpus) for v in snapshot.hosts
               if v.connected and v.snapshot is not None)
    for view in snapshot.hosts:
        if not view.connected or view.snapshot is None:
            lines.append((f"@{view.key}", f"{view.key} · {state_text(view)}"))
        elif len(snapshot.gpus) + live > MAX_GPU_LINES:
            top = fullest_of(view.snapshot.gpus)
            count = len(view.snapshot.gpus)
            lines.append((f"@{view.key}", f"{view.key} · {count} GPU{'s' if count != 1 else ''}"
                          + (f", fullest {top}" if top else "")))
        else:
            lines.extend((g.display_id, gpu_line(g)) for g in view.snapshot.gpus)
    return lines


def fullest_of(gpus: tuple[GpuSample, ...]) -> str:
    """"GPU 2: 91 %" of the fullest of ``gpus`` ("" : no figure known)."""
    known = [g for g in gpus if g.state is DeviceState.OK and g.memory_fraction is not None]
    if not known:
        return ""
    top = max(known, key=lambda g: g.memory_fraction or 0.0)
    return f"GPU {split_id(top.display_id)[1]}: {(top.memory_fraction or 0.0) * 100:.0f} %"


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
        lines = tray_lines(snapshot)
        texts = [text for _key, text in lines]
        if snapshot is not None and snapshot.hosts and state.percent is not None:
            texts.insert(0, f"Fullest: {state.where}: {state.percent} %")
        why = (snapshot.error if snapshot else None) or "No GPU data"
        self.icon.setToolTip("\n".join([APP_NAME, *texts]) if lines else f"{APP_NAME}\n{why}")
        self._set_gpu_lines(lines)

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


__all__ = ["TrayController", "TrayState", "free_all_text", "fullest", "gpu_line", "gpu_name",
           "render_ring", "tray_icon", "tray_lines"]
