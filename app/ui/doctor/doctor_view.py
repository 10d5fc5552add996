"""The Doctor tab: every current diagnosis with its evidence and ranked fixes,
and the OOM reports kept from this run and earlier ones.

Calm by construction: a card is made when its finding appears, its texts are
set only when what it shows changes, and the cards are re-ordered only when
the set of findings or a severity changes (never per tick).  What a diagnosis
says is the core's (:class:`app.core.diagnosis.types.Diagnosis`); this view
formats and lays it out.

Every host's diagnoses are shown (each host's own snapshot's, made by its
server's doctor); with remote hosts watched each card names its host, and a
disconnected host's cards stay, saying since when, their fixes off.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.diagnosis.types import KINDS
from app.core.monitor.hosts import each_host
from app.core.monitor.samples import Snapshot
from app.ui.agents.activity import on_host
from app.ui.agents.detail_facts import stale_action
from app.ui.doctor.fixes import FixList
from app.ui.doctor.past_reports import PastReports
from app.ui.doctor.texts import SEVERITY_RANK, SEVERITY_TEXT, report_row, where_text
from app.ui.style import palette as pal
from app.ui.style.hosts import stale, state_text
from app.ui.style.tables import flat_list
from app.ui.style.text import plain_label, plain_tip

PAST_COLUMNS = ("Time", "Process", "Asked for", "Cause")
_LEVEL_OF = {"critical": pal.LEVEL_CRITICAL, "warning": pal.LEVEL_WARNING,
             "info": pal.LEVEL_NORMAL}


def order_key(d: Any) -> tuple[int, int, str, int]:
    """Most severe first, then the kinds in ``doctor``'s order, then GPU and pid."""
    kind = KINDS.index(d.kind) if d.kind in KINDS else len(KINDS)
    return (SEVERITY_RANK.get(d.severity, 3), kind, d.gpu or "", d.pid or 0)


def shown(d: Any, where: str | None = None) -> tuple[Any, ...]:
    """What a card shows of ``d``: it is redrawn only when this changes."""
    return (d.severity, d.title, tuple(d.evidence), tuple(d.fixes),
            where_text(d) if where is None else where, d.report_id)


class DiagnosisCard(QFrame):
    """One finding: severity, title, where (its host too) and since, evidence, fixes."""

    open_report = Signal(str)  # report id

    def __init__(self, parent: QWidget | None = None, host: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("diagnosisCard")
        self.host_key = host  # the host it was found on ("" this machine)
        self.shown: tuple[Any, ...] = ()
        self.diagnosis: Any = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 10)
        lay.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(8)
        self.badge = QLabel("", self)
        self.badge.setObjectName("severityBadge")
        self.badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        bold = self.badge.font()
        bold.setBold(True)
        self.badge.setFont(bold)
        self.badge.setFixedWidth(max(QFontMetrics(bold).horizontalAdvance(t)
                                     for t in SEVERITY_TEXT.values()) + 18)
        # A finding names processes, models and hosts (a remote one's is its server's).
        self.title = plain_label(QLabel("", self))
        self.title.setObjectName("diagnosisTitle")
        self.title.setWordWrap(True)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        tf = self.title.font()
        tf.setBold(True)
        self.title.setFont(tf)
        self.where = plain_label(QLabel("", self))
        self.where.setObjectName("secondary")
        self.report_button = QPushButton("Open report…", self)
        self.report_button.setObjectName("openReportButton")
        self.report_button.setAutoDefault(False)
        self.report_button.clicked.connect(self._open)
        head.addWidget(self.badge, 0, Qt.AlignmentFlag.AlignTop)
        head.addWidget(self.title, 1)
        head.addWidget(self.where, 0, Qt.AlignmentFlag.AlignTop)
        head.addWidget(self.report_button, 0, Qt.AlignmentFlag.AlignTop)
        lay.addLayout(head)
        self.evidence = plain_label(QLabel("", self))
        self.evidence.setObjectName("diagnosisEvidence")
        self.evidence.setWordWrap(True)
        self.evidence.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.evidence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.evidence)
        self.fixes = FixList(self, host)
        lay.addWidget(self.fixes)

    def set(self, d: Any, where: str | None = None) -> bool:
        """Show ``d`` (``where``: its place, its host named, when not :func:`where_text`'s);
        False (nothing touched) when it shows the same as before."""
        self.diagnosis = d
        now = shown(d, where)
        if now == self.shown:
            return False
        self.shown = now
        self.badge.setText(SEVERITY_TEXT.get(d.severity, d.severity))
        self.title.setText(d.title)
        self.where.setText(now[4])
        self.evidence.setText("\n".join(f"·  {line}" for line in d.evidence))
        self.evidence.setVisible(bool(d.evidence))
        self.fixes.set_fixes(tuple(d.fixes))
        self.fixes.setVisible(bool(d.fixes))
        self.report_button.setVisible(d.report_id is not None)
        self._style()
        return True

    def _open(self) -> None:
        if self.diagnosis is not None and self.diagnosis.report_id:
            self.open_report.emit(self.diagnosis.report_id)

    def _style(self) -> None:
        severity = self.diagnosis.severity if self.diagnosis is not None else "info"
        edge = QColor(pal.level_color(_LEVEL_OF.get(severity, pal.LEVEL_NORMAL)))
        base = self.palette().color(QPalette.ColorRole.Base)
        border = pal.hex_color(pal.faint(self.palette()))
        badge_fg = "#FFFFFF" if severity != "warning" else "#1A1A1A"
        css = (f"QFrame#diagnosisCard {{ background: {pal.hex_color(base)};"
               f" border: 1px solid {border}; border-left: 4px solid {pal.hex_color(edge)};"
               " border-radius: 6px; }"
               f"QLabel#severityBadge {{ background: {pal.hex_color(edge)}; color: {badge_fg};"
               " border-radius: 4px; padding: 1px 6px; font-weight: bold; }")
        if css != self.styleSheet():  # setting it changes the palette: only when it differs
            self.setStyleSheet(css)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange and self.diagnosis is not None:
            self._style()
        super().changeEvent(event)


class DoctorView(QWidget):
    """The Doctor tab's contents (see the module's docstring)."""

    request = Signal(object)  # a typed request a fix sends
    record_requested = Signal(int, str)  # (pid, host): its detail view at "Record allocations"
    open_report = Signal(object)  # an OomReport to show
    count_changed = Signal(int)  # findings of severity warning or critical
    fit_requested = Signal()  # "Will it fit?…": the memory a run needs, before it runs

    def __init__(self, parent: QWidget | None = None, past: PastReports | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("doctorView")
        #: (host, diagnosis key) -> its card ("" this machine)
        self.cards: dict[tuple[Any, ...], DiagnosisCard] = {}
        self.order: list[tuple[Any, ...]] = []
        self.reports: dict[str, Any] = {}  # id -> OomReport (live and stored)
        self.report_hosts: dict[str, str] = {}  # id -> the remote host it happened on
        self.warnings = 0
        self.redraws = 0  # cards set afresh (tests: calm updates)
        self._can_act = True
        self._watch = (-1, -1)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 6, 0, 0)
        lay.setSpacing(12)

        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("doctorScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.host = QWidget(self.scroll)
        self.host.setObjectName("doctorHost")
        self.cards_box = QVBoxLayout(self.host)
        self.cards_box.setContentsMargins(0, 0, 8, 0)
        self.cards_box.setSpacing(8)
        self.empty_label = QLabel("", self.host)
        self.empty_label.setObjectName("doctorEmpty")
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setContentsMargins(12, 24, 12, 24)
        self.cards_box.addWidget(self.empty_label)
        self.cards_box.addStretch(1)
        self.scroll.setWidget(self.host)

        side = QWidget(self)
        # The findings take the room; the list of past reports a column beside them.
        side.setMinimumWidth(self.fontMetrics().horizontalAdvance("0") * 44)
        side.setMaximumWidth(self.fontMetrics().horizontalAdvance("0") * 64)
        slay = QVBoxLayout(side)
        slay.setContentsMargins(0, 0, 0, 0)
        slay.setSpacing(4)
        shead = QHBoxLayout()
        stitle = QLabel("Past OOM reports", side)
        sf = stitle.font()
        sf.setBold(True)
        stitle.setFont(sf)
        self.refresh_button = QPushButton("Refresh", side)
        self.refresh_button.setObjectName("refreshReports")
        self.refresh_button.setToolTip("Read the stored reports again")
        shead.addWidget(stitle)
        shead.addStretch(1)
        shead.addWidget(self.refresh_button)
        slay.addLayout(shead)
        self.past_list = flat_list(side, "pastReports", PAST_COLUMNS)
        self.past_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.past_list.header().setStretchLastSection(True)
        fm = self.fontMetrics()
        for col, sample in ((0, "30 Dec 00:00"), (1, "serve_embed…"), (2, "000.0 MiB")):
            self.past_list.header().resizeSection(col, max(
                fm.horizontalAdvance(sample), fm.horizontalAdvance(PAST_COLUMNS[col])) + 24)
        self.past_list.itemActivated.connect(self._on_past_activated)
        self.past_list.itemDoubleClicked.connect(self._on_past_activated)
        slay.addWidget(self.past_list, 1)
        self.past_note = plain_label(QLabel("Reading…", side))  # with a read error
        self.past_note.setObjectName("secondary")
        self.past_note.setWordWrap(True)
        slay.addWidget(self.past_note)
        cards = QVBoxLayout()
        cards.setSpacing(4)
        chead = QHBoxLayout()
        chead.addStretch(1)
        self.fit_button = QPushButton("Will it fit?…", self)
        self.fit_button.setObjectName("fitButton")
        self.fit_button.setToolTip("Estimate the memory a run needs before running it, "
                                   "against what a GPU has free now")
        self.fit_button.clicked.connect(self.fit_requested)
        chead.addWidget(self.fit_button)
        cards.addLayout(chead)
        cards.addWidget(self.scroll, 1)
        lay.addLayout(cards, 3)
        lay.addWidget(side, 1)

        self.past = past if past is not None else PastReports(parent=self)
        self.past.loaded.connect(self.set_past)
        self.refresh_button.clicked.connect(self.past.refresh)
        self._past_ids: list[str] = []
        self._past_read = False  # the store is read when the tab is first shown
        self._apply_style()

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        if not self._past_read:
            self._past_read = True
            self.past.refresh()

    # -- per snapshot ---------------------------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot, can_act: bool = True) -> None:
        """Show every host's diagnoses (this machine's ``snapshot.diagnoses`` and each
        remote host's); touches widgets only where something changed."""
        for report in snapshot.oom_reports:
            self.add_report(report)
        named = bool(snapshot.hosts)  # with remote hosts, each card names its own
        diagnoses: dict[tuple[Any, ...], Any] = {}
        places: dict[tuple[Any, ...], tuple[str, str | None, str, Any]] = {}
        for view, own in each_host(snapshot):
            host = "" if view is None else view.key
            late = state_text(view) if view is not None and stale(view) else None
            if view is not None and view.fresh:
                for report in own.oom_reports:
                    self.add_report(report, host)
            why_not = "" if late is None else stale_action(host, late)
            user = None if view is None else view.user
            for d in own.diagnoses:
                key = (host, *d.key)
                diagnoses[key] = d
                places[key] = (where_text(d, host, late) if named else where_text(d),
                               user, why_not, own)
        changed = False
        for key in [k for k in self.cards if k not in diagnoses]:
            card = self.cards.pop(key)
            card.hide()
            card.deleteLater()
            changed = True
        for key, d in diagnoses.items():
            card = self.cards.get(key)
            where, user, why_not, own = places[key]
            if card is None:
                card = self.cards[key] = DiagnosisCard(self.host, key[0])
                card.fixes.request.connect(self.request)
                card.fixes.record_requested.connect(self.record_requested)
                card.open_report.connect(self._open_id)
                card.fixes.set_can_act(self._can_act and not why_not)
            if card.set(d, where):
                self.redraws += 1
                changed = True
            card.fixes.check_terminate(own, user, why_not)
            card.fixes.set_can_act(can_act and not why_not)  # (touches what changed only)
        order = sorted(diagnoses, key=lambda k: (order_key(diagnoses[k]), k[0]))
        if order != self.order:
            self.order = order
            for i, key in enumerate(order):  # after the empty label, before the stretch
                self.cards_box.insertWidget(1 + i, self.cards[key])
        self._can_act = can_act
        self._update_empty(snapshot)
        if changed:
            warnings = sum(1 for d in diagnoses.values() if d.severity in ("warning", "critical"))
            if warnings != self.warnings:
                self.warnings = warnings
                self.count_changed.emit(warnings)

    def _update_empty(self, snapshot: Snapshot) -> None:
        empty = not self.cards
        if self.empty_label.isHidden() == empty:
            self.empty_label.setVisible(empty)
        if not empty:
            return
        hosts = each_host(snapshot)
        pids = {(g.host, p.pid) for _, own in hosts for g in own.gpus for p in g.processes}
        watch = (len(pids), sum(len(own.gpus) for _, own in hosts), len(snapshot.hosts))
        if watch != self._watch:
            self._watch = watch
            n, m, h = watch
            where = f" of {h + 1} hosts" if h else ""
            self.empty_label.setText(
                f"No problems found. Watching {n} process{'es' if n != 1 else ''} on {m} "
                f"GPU{'s' if m != 1 else ''}{where} for leaks, GPUs filling up, "
                "fragmentation, idle caches and out-of-memory errors.")

    def cards_in_order(self) -> list[DiagnosisCard]:
        return [self.cards[k] for k in self.order if k in self.cards]

    # -- OOM reports ----------------------------------------------------------------------------
    def add_report(self, report: Any, host: str = "") -> None:
        """A report from this run (of ``host``, "" this machine): kept for its card
        and listed with the stored ones."""
        known = report.id in self.reports
        self.reports[report.id] = report
        if host:
            self.report_hosts[report.id] = host
        if not known:
            self._insert_past(report, 0)

    def set_past(self, reports: Iterable[Any], error: str = "") -> None:
        """The stored reports (newest first), read off the GUI thread; this run's
        reports stay listed."""
        stored = list(reports)
        ids = {r.id for r in stored}
        live = [self.reports[i] for i in self._past_ids if i not in ids and i in self.reports]
        for r in stored:
            self.reports[r.id] = r
        self.past_list.clear()
        self._past_ids = []
        for r in sorted([*live, *stored], key=lambda r: -r.time):
            self._insert_past(r, len(self._past_ids))
        if error:
            self.past_note.setText(f"The stored reports could not be read: {error}")
        else:
            self._note_count()

    def _insert_past(self, report: Any, index: int) -> None:
        row = report_row(report)
        host = self.report_hosts.get(report.id, "")
        row[1] = on_host(host, row[1])
        item = QTreeWidgetItem(row)
        item.setData(0, Qt.ItemDataRole.UserRole, report.id)
        tip = plain_tip("\n".join([on_host(host, report.title), *report.explanation]))
        for col in range(len(PAST_COLUMNS)):
            item.setToolTip(col, tip)
        self.past_list.insertTopLevelItem(index, item)
        self._past_ids.insert(index, report.id)
        self._note_count()

    def _note_count(self) -> None:
        n = len(self._past_ids)
        self.past_note.setText("Double-click a report to open it." if n else
                               "None yet: an out-of-memory error in a process with an agent "
                               "is explained here.")

    def _on_past_activated(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        self._open_id(str(item.data(0, Qt.ItemDataRole.UserRole)))

    def _open_id(self, report_id: str) -> None:
        report = self.reports.get(report_id)
        if report is not None:
            self.open_report.emit(report)

    # -- style ----------------------------------------------------------------------------------
    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_style()
        super().changeEvent(event)

    def _apply_style(self) -> None:
        muted = pal.hex_color(pal.muted(self.palette()))
        css = ("QScrollArea#doctorScroll, QWidget#doctorHost { background: transparent; }"
               f"QLabel#doctorEmpty {{ color: {muted}; }}"
               + pal.view_rules(self.palette(), "pastReports"))
        if css != self.styleSheet():
            self.setStyleSheet(css)


__all__ = ["DiagnosisCard", "DoctorView", "order_key"]
