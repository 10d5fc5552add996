"""The process table's columns and rows: what each cell shows, sorts by and explains.

A :class:`ProcessRow` is one (GPU, process) of the latest snapshot, of this
machine or of a remote host (a model server's process is named by its server:
"Ollama 0.12.3 (server)", "Ollama runner · qwen2.5:7b"); an
:class:`UnattributedRow` is a GPU's used memory no listed process holds
(:mod:`app.ui.gpu.unattributed`), keyed ``(display_id, UNATTRIBUTED_KEY, None)``:
a string where a pid would be, so it never equals a process's key.

Pids are only unique per host: a row's key starts with its GPU's window-wide
id, which names the host (``"0@gpu1"``), so two hosts' pid 1234 on their GPU
0 are two rows.  A disconnected host's rows keep its last figures, greyed,
and say since when (``ProcessRow.stale``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont

from app.core.agents.types import AgentReport, DeviceMemory
from app.core.monitor.hosts import split_id
from app.core.monitor.samples import Container, GpuSample, HostStatus, ProcessSample
from app.core.servers.types import ModelServer
from app.core.units import NA, fmt_bytes, fmt_duration, fmt_percent
from app.ui.agents.server_texts import process_name, server_tooltip
from app.ui.gpu.unattributed import UNATTRIBUTED_KEY, explanation, unknown_reason
from app.ui.style import palette as pal
from app.ui.style.hosts import host_label

# (gpu display_id, pid, create_time); (display_id, UNATTRIBUTED_KEY, None) for the
# unattributed row.  A remote GPU's display_id names its host ("0@gpu1").
RowKey = tuple[str, int | str, float | None]
# (host rank: this machine 0, then the hosts in order; GPU index; MIG index or -1)
GpuOrder = tuple[int, int, int]

COLUMNS = ("Host", "GPU", "PID", "User", "Container", "Command", "PyTorch", "VRAM", "Cache",
           "% of GPU", "SM %", "CPU %", "RSS", "Uptime")
(COL_HOST, COL_GPU, COL_PID, COL_USER, COL_CONTAINER, COL_COMMAND, COL_AGENT, COL_VRAM, COL_CACHE,
 COL_PCT, COL_SM, COL_CPU, COL_RSS, COL_UPTIME) = range(len(COLUMNS))
NUMERIC = {COL_PID, COL_VRAM, COL_CACHE, COL_PCT, COL_SM, COL_CPU, COL_RSS, COL_UPTIME}
#: Columns whose first click sorts largest first (a pid is looked up, not ranked).
LARGEST_FIRST = NUMERIC - {COL_PID}

SORT_ROLE = Qt.ItemDataRole.UserRole + 1  # the raw value (None = unknown)
KEY_ROLE = Qt.ItemDataRole.UserRole + 2  # (display_id, (pid, create_time))
AGENT_ROLE = Qt.ItemDataRole.UserRole + 3  # the process's AgentReport, or None
SERVER_ROLE = Qt.ItemDataRole.UserRole + 4  # the ModelServer holding the process, or None
HOST_ROLE = Qt.ItemDataRole.UserRole + 5  # the row's host key ("" this machine)
STALE_ROLE = Qt.ItemDataRole.UserRole + 6  # why its figures are not current, or None

COLUMN_TIPS = {
    COL_HOST: "The machine the process runs on",
    COL_VRAM: "GPU memory used by this process on this GPU",
    COL_PCT: "This process's share of the GPU's total memory",
    COL_SM: "Share of the GPU's streaming multiprocessors (recent average)",
    COL_CPU: "CPU use in percent of one core",
    COL_RSS: "Host (CPU) resident memory",
    COL_AGENT: "PyTorch version reported by the VRAM Steward agent in the process\n"
               "(blank: no agent in this process)",
    COL_CACHE: "PyTorch's cached, unused GPU memory (reserved − allocated) on this GPU:\n"
               "what Free cache can return. n/a without an agent.",
    COL_CONTAINER: "The container the process runs in: runtime and name (or short id)\n"
                   "(blank: not in a container)",
}

UNATTRIBUTED_TEXT = "Unattributed (held by no listed process)"
ENDED_TIP = "Ended: the row goes when the pointer leaves the table"
COMMAND_ROOM = 34  # characters the command keeps before the container column narrows
COMMAND_CHARS = 22  # characters the command keeps however narrow the table (it scrolls)
SWATCH = 10  # px, the side of a row's colour square

_NO_AGENT = "No VRAM Steward agent in this process: PyTorch figures unknown"


def stale_tooltip(host: str, state: str, reason: str | None) -> str:
    """A disconnected host's rows: since when, why, and that the figures are its last."""
    why = f"\n{reason}" if reason else ""
    return (f"{host_label(host)}: {state}{why}\nThe figures are the last it sent; "
            "actions wait until it is connected again.")


def container_tooltip(c: Container) -> str:
    """Everything known about a process's container, one fact a line."""
    lines = [f"Runtime: {c.runtime}", f"ID: {c.id}"]
    if c.name:
        lines.append(f"Name: {c.name}")
    if c.pod:
        lines.append(f"Kubernetes pod: {c.pod}")
    return "\n".join(lines)


def agent_icon():
    """A small PyTorch-orange dot marking rows with an agent (made once)."""
    global _ICON
    if _ICON is None:
        from PySide6.QtGui import QIcon, QPainter, QPixmap

        pm = QPixmap(16, 16)
        pm.fill(Qt.GlobalColor.transparent)
        p = QPainter(pm)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(pal.AGENT_COLOR))
        p.drawEllipse(3, 3, 10, 10)
        p.end()
        _ICON = QIcon(pm)
    return _ICON


_ICON = None


def swatch_icon(color: QColor | None, size: int = 16):
    """A ``SWATCH`` px square of ``color`` centred in ``size`` px; blank for None, so
    commands with and without a swatch start at the same x (made once per colour)."""
    from PySide6.QtGui import QIcon, QPainter, QPixmap

    key = (None if color is None else color.rgba(), size)
    icon = _SWATCHES.get(key)
    if icon is None:
        pm = QPixmap(size, size)
        pm.fill(Qt.GlobalColor.transparent)
        if color is not None:
            p = QPainter(pm)
            edge = QColor(color).darker(140)
            p.setPen(edge)
            p.setBrush(color)
            inset = (size - SWATCH) // 2
            p.drawRect(inset, inset, SWATCH - 1, SWATCH - 1)
            p.end()
        icon = QIcon(pm)
        _SWATCHES[key] = icon
    return icon


_SWATCHES: dict = {}


class _HostCells:
    """The host cells every row shares: its host, and whether its figures are stale."""

    __slots__ = ()
    display_id: str
    host: str
    stale: str | None
    stale_tip: str | None
    _shown: tuple | None

    def host_text(self) -> str:
        """"gpu1", "this machine", "gpu1 · disconnected since 15:04:12"."""
        label = host_label(self.host)
        return label if self.stale is None else f"{label} · {self.stale}"

    def gpu_text(self) -> str:
        """The GPU as its host numbers it (the Host column names the host)."""
        return split_id(self.display_id)[1]

    def shown(self) -> tuple[tuple[str, bool], ...]:
        """Per column, the cell's text and whether it is muted (unknown): made
        once a row and kept while its signature stays the same
        (:meth:`keep_shown`), so a repaint formats nothing."""
        cells = self._shown
        if cells is None:
            cells = self._shown = tuple((self.text(c), self.is_unknown(c))
                                        for c in range(len(COLUMNS)))
        return cells

    def was_shown(self) -> bool:
        """Whether :meth:`shown` was asked for (the row was painted)."""
        return self._shown is not None

    def keep_shown(self, old: _HostCells) -> None:
        """Take ``old``'s cells: the caller found both rows' signatures equal."""
        self._shown = old._shown


@dataclass(slots=True)
class ProcessRow(_HostCells):
    display_id: str
    gpu_order: GpuOrder  # (host rank, index, mig index or -1): numeric GPU sort
    proc: ProcessSample
    memory_total: int | None
    uptime: float | None
    gpu_note: str | None
    agent: AgentReport | None = None
    device: DeviceMemory | None = None  # the agent's allocator figures for this GPU
    server: ModelServer | None = None  # the model server the process is (or works for)
    now: float = 0.0  # the snapshot's time (the server's idle clocks in the tooltip)
    host: str = ""  # the host key ("" this machine)
    stale: str | None = None  # "disconnected since 15:04:12": the figures are the last known
    stale_tip: str | None = None
    _shown: tuple | None = field(default=None, repr=False, compare=False)
    _signature: tuple | None = field(default=None, repr=False, compare=False)
    #: (display_id, pid, create time): the row's identity, read many times a tick.
    key: RowKey = field(init=False, repr=False, compare=False)

    def signature(self) -> tuple:
        """What tells two versions of a row apart; made once (a row is complete,
        agent and all, before it is first compared).  The uptime as shown ("4 min
        05 s", "3 h 02 min"): an hours-old process repaints once a minute, not
        every second."""
        sig = self._signature
        if sig is None:
            sig = self._signature = (
                self.proc, self.memory_total, fmt_duration(self.uptime), self.gpu_note,
                self._agent_signature(), self._server_name(), self.stale, self.stale_tip)
        return sig

    def _server_name(self) -> str | None:
        s = self.server
        return None if s is None else process_name(s, self.proc.pid, self.gpu_order[1])

    def command_text(self) -> str | None:
        """The server's name for its processes, else the command line (or name)."""
        return self._server_name() or self.proc.command or self.proc.name

    def _agent_signature(self) -> tuple | None:
        a = self.agent
        return None if a is None else (a.torch, a.torch_status, a.python, a.allocator_backend,
                                       a.cuda_initialized, len(a.models), self.device)

    def cells(self) -> tuple:
        """Per column, what its cell shows (sort value; the uptime as text), then
        everything that colours or explains the whole row: two rows that differ
        only in a few of these repaint only those cells."""
        p = self.proc
        shown = tuple(fmt_duration(self.uptime) if col == COL_UPTIME else self.raw(col)
                      for col in range(len(COLUMNS)))
        return (*shown, p.host_status, p.name, self.gpu_note, self.memory_total,
                self._agent_signature(), self.server is not None, self.stale, self.stale_tip)

    def __post_init__(self) -> None:
        self.key = (self.display_id, self.proc.pid, self.proc.create_time)

    @property
    def item_key(self) -> tuple[str, Hashable]:
        """What KEY_ROLE returns: (display_id, process key)."""
        return (self.display_id, self.proc.key)

    @property
    def order(self) -> tuple[int, int]:
        """Tie-break when sorting: processes by pid."""
        return (0, self.proc.pid)

    def raw(self, col: int):
        p = self.proc
        if col == COL_HOST:
            return (self.gpu_order[0], self.host_text().lower())
        if col == COL_GPU:
            return self.gpu_order
        if col == COL_PID:
            return p.pid
        if col == COL_USER:
            return p.user.lower() if p.user else None
        if col == COL_CONTAINER:
            return p.container.label.lower() if p.container else None
        if col == COL_COMMAND:
            text = self.command_text()
            return text.lower() if text else None
        if col == COL_VRAM:
            return p.gpu_memory
        if col == COL_AGENT:
            a = self.agent
            return None if a is None else (a.torch or a.torch_status).lower()
        if col == COL_CACHE:
            return None if self.device is None else self.device.cache
        if col == COL_PCT:
            if p.gpu_memory is None or not self.memory_total:
                return None
            return 100.0 * p.gpu_memory / self.memory_total
        if col == COL_SM:
            return p.sm_util
        if col == COL_CPU:
            return p.cpu_percent
        if col == COL_RSS:
            return p.host_rss
        if col == COL_UPTIME:
            return self.uptime
        return None

    def reason(self) -> str:
        """Why a cell of this row may be unknown (for tooltips)."""
        return self.proc.host_status.label

    def text(self, col: int) -> str:
        p = self.proc
        status = p.host_status
        if col == COL_HOST:
            return self.host_text()
        if col == COL_GPU:
            return self.gpu_text()
        if col == COL_PID:
            return str(p.pid)
        if col == COL_USER:
            if p.user:
                return p.user
            return "access denied" if status == HostStatus.ACCESS_DENIED else NA
        if col == COL_CONTAINER:
            return p.container.label if p.container else ""
        if col == COL_COMMAND:
            base = self.command_text()
            if status == HostStatus.NOT_VISIBLE:
                return base or status.label
            if status == HostStatus.EXITED:
                return f"{base} (exited)" if base else status.label
            return base or NA
        if col == COL_AGENT:
            a = self.agent
            if a is None:
                return ""
            return a.torch or a.torch_status
        value = self.raw(col)
        if value is None:
            return NA
        if col in (COL_VRAM, COL_RSS, COL_CACHE):
            return fmt_bytes(value)
        if col == COL_PCT:
            return fmt_percent(value, 1 if value < 10 else 0)
        if col in (COL_SM, COL_CPU):
            return fmt_percent(value)
        if col == COL_UPTIME:
            return fmt_duration(value)
        return str(value)

    def tooltip(self, col: int) -> str | None:
        tip = self._tooltip(col)
        if self.stale_tip is None:
            return tip
        return self.stale_tip if not tip else f"{self.stale_tip}\n\n{tip}"

    def _tooltip(self, col: int) -> str | None:
        p = self.proc
        if col == COL_HOST:
            return COLUMN_TIPS[col]
        if col == COL_COMMAND:
            parts = [p.command or p.name or NA]
            if p.host_status.label:
                parts.append(f"({p.host_status.label})")
            parts.append(f"PID {p.pid} on GPU {self.display_id}, {p.kind}")
            if self.server is not None:
                parts = [*server_tooltip(self.server, p.pid, self.now), "", *parts,
                         "Double-click the row for its models; right-click to unload them"]
            return "\n".join(parts)
        if col == COL_GPU and self.host:
            return f"GPU {self.gpu_text()} of {self.host} ({self.display_id})"
        if col in (COL_GPU, COL_PID):
            return None
        if col == COL_AGENT:
            return self.agent_tooltip()
        if col == COL_CACHE:
            d = self.device
            if self.agent is None:
                return _NO_AGENT
            if d is None or d.cache is None:
                return "The agent reports no allocator figures for this GPU"
            return (f"Cache {fmt_bytes(d.cache)} = reserved {fmt_bytes(d.reserved)}"
                    f" − allocated {fmt_bytes(d.allocated)}\n"
                    "What Free cache can return to the driver")
        if col == COL_USER and p.user:
            return p.user
        if col == COL_CONTAINER:
            return container_tooltip(p.container) if p.container else COLUMN_TIPS[col]
        if self.text(col) in (NA, "access denied"):
            if p.host_status.label:
                return p.host_status.label
            if col in (COL_VRAM, COL_PCT, COL_SM) and self.gpu_note:
                return self.gpu_note
            return "not reported"
        return COLUMN_TIPS.get(col)

    def agent_tooltip(self) -> str:
        a = self.agent
        if a is None:
            return _NO_AGENT
        lines = [f"VRAM Steward agent: {a.torch_status if a.torch is None else 'torch ' + a.torch}",
                 f"Python {a.python or NA}, allocator {a.allocator_backend or NA}",
                 "CUDA " + ("n/a" if a.cuda_initialized is None
                            else "initialised" if a.cuda_initialized else "not initialised"),
                 f"{len(a.models)} model{'s' if len(a.models) != 1 else ''}",
                 "Double-click the row for details"]
        return "\n".join(lines)

    def is_unknown(self, col: int) -> bool:
        if self.stale is not None:
            return True  # greyed as a whole: its host's last figures
        if col in (COL_HOST, COL_GPU, COL_PID, COL_CONTAINER):
            return False
        if col == COL_AGENT:
            return self.agent is not None and self.agent.torch is None
        if col == COL_USER:
            return not self.proc.user
        if col == COL_COMMAND:
            return not self.command_text() or self.proc.host_status in (
                HostStatus.EXITED, HostStatus.NOT_VISIBLE)
        return self.raw(col) is None


@dataclass(slots=True)
class UnattributedRow(_HostCells):
    """One GPU's used memory that no listed process holds (``GpuSample.unattributed_memory``).

    Not a process: no pid, no host figures (blank, not n/a: they do not apply),
    never selectable, no agent.  Shown in italics and muted."""

    display_id: str
    gpu_order: GpuOrder
    memory: int | None  # the core's figure, never recomputed here
    memory_total: int | None
    reason: str | None  # why ``memory`` is unknown
    host: str = ""
    stale: str | None = None
    stale_tip: str | None = None
    agent: None = None
    device: None = None
    proc: None = None
    server: None = None
    _shown: tuple | None = field(default=None, repr=False, compare=False)

    def signature(self) -> tuple:
        return (self.memory, self.memory_total, self.reason, self.stale, self.stale_tip)

    @property
    def key(self) -> RowKey:
        return (self.display_id, UNATTRIBUTED_KEY, None)

    @property
    def item_key(self) -> tuple[str, Hashable]:
        return (self.display_id, UNATTRIBUTED_KEY)

    @property
    def order(self) -> tuple[int, int]:
        return (1, 0)  # after the processes it ties with

    def raw(self, col: int):
        if col == COL_HOST:
            return (self.gpu_order[0], self.host_text().lower())
        if col == COL_GPU:
            return self.gpu_order
        if col == COL_VRAM:
            return self.memory
        if col == COL_PCT:
            if self.memory is None or not self.memory_total:
                return None
            return 100.0 * self.memory / self.memory_total
        return None

    def text(self, col: int) -> str:
        if col == COL_HOST:
            return self.host_text()
        if col == COL_GPU:
            return self.gpu_text()
        if col == COL_COMMAND:
            return UNATTRIBUTED_TEXT
        if col == COL_VRAM:
            return fmt_bytes(self.memory)
        if col == COL_PCT:
            value = self.raw(col)
            return NA if value is None else fmt_percent(value, 1 if value < 10 else 0)
        return ""

    def tooltip(self, col: int) -> str:
        tip = explanation(self.display_id, self.memory, self.reason)
        return tip if self.stale_tip is None else f"{self.stale_tip}\n\n{tip}"

    def is_unknown(self, col: int) -> bool:
        return True  # the whole row is muted: it is a remainder, not a process


def unattributed_row(gpu: GpuSample, order: GpuOrder, host: str = "",
                     stale: str | None = None, stale_tip: str | None = None) -> UnattributedRow:
    return UnattributedRow(gpu.display_id, order, gpu.unattributed_memory, gpu.memory_total,
                           unknown_reason(gpu), host, stale, stale_tip)


def italic(font: QFont) -> QFont:
    font = QFont(font)
    font.setItalic(True)
    return font
