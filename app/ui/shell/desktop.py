"""The app on the desktop: tray, alerts, window behaviour, settings.

:class:`DesktopShell` wires the pieces around the main window:

* alerts: every snapshot goes through the :class:`AlertPolicy`; what it
  returns goes to the :class:`Notifier` (tray message, D-Bus notification or
  banner, see :mod:`app.ui.shell.notifier`) and to the Activity log;
* the tray icon, when the desktop has a tray -- checked again every few
  seconds while it has none, since a tray (a GNOME extension, a panel) can
  appear after the app started;
* closing the window hides it in the tray when there is one (saying so the
  first time), and quits otherwise; "start minimised";
* the settings dialog, applied live and saved with QSettings;
* the Hosts dialog (``hosts_shell``): remote hosts added and removed, saved
  and watched at once.

Remote hosts count as this machine does: the tray shows the fullest GPU of
any host with current figures, and alerts (memory, OOM reports, "full
soon") name their host; a host's OOM reports arrive once, with its fresh
view.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from PySide6.QtCore import QEvent, QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication, QDialog

from app import APP_NAME
from app.core.control.requests import FreeCache, Reload, Unload, UnloadIdle
from app.core.control.targets import idle_models, label_of
from app.core.monitor.hosts import LOCAL, each_host, every_gpu, split_id
from app.core.monitor.samples import Snapshot
from app.core.policies.alerts import Alert, AlertConfig, AlertPolicy, on_host
from app.core.policies.pressure import UNLOAD as POLICY_UNLOAD
from app.ui.agents.activity import ActivityEntry
from app.ui.agents.auto_unload import notice_texts
from app.ui.agents.server_texts import freeable
from app.ui.doctor.texts import oom_line
from app.ui.settings.dialog import GpuEntry, SettingsDialog
from app.ui.settings.values import AlertSettings, UiSettings
from app.ui.shell.controller import ControllerAdapter
from app.ui.shell.hosts_shell import HostsShell
from app.ui.shell.notifier import Channel, Notifier, PlatformAnswers, choose_channel, probe_platform
from app.ui.shell.tray import TrayController, gpu_line
from app.ui.shell.window_placement import place, remember, show_placed
from app.ui.style.hosts import gpu_text
from app.ui.window.main_window import MainWindow

log = logging.getLogger(__name__)

PAUSE_S = 3600.0
#: The notice of the first automatic unload, and its two actions.
AUTO_UNLOAD_NOTICE = "auto-unload"
RELOAD_NOW = "reload"
AUTO_UNLOAD_OFF = "auto-unload-off"
TRAY_POLL_MS = 5000
TRAY_REFRESH_S = 1.0  # tooltip and menu text at most this often


def alert_configs(settings: AlertSettings, snapshot: Snapshot | None
                  ) -> tuple[AlertConfig, dict[str, AlertConfig]]:
    """The policy's default config and per-GPU overrides (keyed by display id; the
    settings key GPUs by UUID so levels follow a card, not a slot)."""
    base = AlertConfig(threshold=settings.threshold, rearm=settings.rearm,
                       min_interval_s=settings.min_interval_s, enabled=settings.notifications,
                       oom_alerts=settings.oom_alerts and settings.notifications,
                       retry_alerts=settings.retry_alerts and settings.notifications)
    per_gpu: dict[str, AlertConfig] = {}
    for gpu in every_gpu(snapshot):  # a remote GPU's levels follow its UUID too
        own = settings.per_gpu.get(gpu.uuid or "") or settings.per_gpu.get(gpu.display_id)
        if own is not None:
            per_gpu[gpu.display_id] = dataclasses.replace(base, threshold=own.threshold,
                                                          rearm=own.rearm)
    return base, per_gpu


def report_alert(report: Any, now: float, host: str = LOCAL) -> Alert:
    """The notification of an OOM report (the figures are the report's), naming
    its host when it is not this machine."""
    best = f" Best fix: {report.fixes[0].text}" if report.fixes else ""
    return Alert("oom", report.gpu, on_host(host, report.title), f"{oom_line(report)}.{best}",
                 pid=report.pid, time=now, host=host)


def new_reports(snapshot: Snapshot) -> dict[tuple[str, int], Any]:
    """The OOM reports that arrived with ``snapshot``, by (host, pid): this
    machine's, and each remote host's fresh view's (each arrives once)."""
    reports: dict[tuple[str, int], Any] = {(LOCAL, r.pid): r for r in snapshot.oom_reports}
    for view in snapshot.hosts:
        if view.fresh and view.snapshot is not None:
            reports.update(((view.key, r.pid), r) for r in view.snapshot.oom_reports)
    return reports


class DesktopShell(QObject):
    settings_applied = Signal(object)  # UiSettings
    alerted = Signal(object, str)  # Alert, channel

    def __init__(self, app: QApplication, window: MainWindow, sampler: Any = None,
                 store: Any = None, theme: Any = None, dbus: Any = None,
                 autostart: Any = None, parent: QObject | None = None,
                 controller: ControllerAdapter | None = None) -> None:
        super().__init__(parent or app)
        self.app = app
        self.window = window
        self._controller = controller
        self.sampler = sampler
        self.store = store
        self.theme = theme
        self.dbus = dbus
        self.autostart = autostart
        self.policy = AlertPolicy()
        self.tray: TrayController | None = None
        self.answers = PlatformAnswers(tray=False, dbus=False, linux=False)
        self.notifier = Notifier(Channel.BANNER, None, dbus, window.alert_banner, self)
        self.notifier.free_requested.connect(self.free_caches)
        self.notifier.show_requested.connect(self.show_window)
        self.notifier.action_requested.connect(self._on_notice_action)
        self.notifier.report_requested.connect(self.open_report)
        self._reported: dict[tuple[str, int], str] = {}  # (host, pid) -> its latest report
        self._full_soon: set[str] = set()  # GPUs whose "full soon" alert holds
        #: The run's first automatic unload has been told of; what it unloaded
        #: ((pid, model id, name, device), for "Reload now").
        self.auto_unload_noticed = False
        self._auto_unloaded: tuple[tuple[int, str, str, str], ...] = ()
        self.quitting = False
        self._latest: Snapshot | None = None
        self._gpu_ids: tuple[str, ...] = ()
        self._tray_refreshed = 0.0
        self._pause_timer = QTimer(self)
        self._pause_timer.setSingleShot(True)
        self._pause_timer.timeout.connect(lambda: self.pause_alerts(False))
        self._tray_poll = QTimer(self)
        self._tray_poll.setInterval(TRAY_POLL_MS)
        self._tray_poll.timeout.connect(self._poll_tray)
        window.destroyed.connect(self._tray_poll.stop)  # the poll shows its finds in the window
        window.installEventFilter(self)
        window.settings_requested.connect(self.open_settings)
        self.hosts = HostsShell(window, getattr(sampler, "fleet", None), self.save, self)
        hosts_requested = getattr(window, "hosts_requested", None)
        if hosts_requested is not None:
            hosts_requested.connect(self.hosts.open)
        window.hint_banner.free_button.hide()
        self._apply_alert_settings()

    @property
    def controller(self) -> ControllerAdapter:
        """Where the tray's and the notifications' actions go (the window's unless
        one was given)."""
        return self._controller if self._controller is not None else self.window.controller

    @property
    def settings(self) -> UiSettings:
        """The window's settings: one object, edited by its controls and by the dialog."""
        return self.window.settings

    # -- start ------------------------------------------------------------------------------
    def start(self, minimised: bool = False, answers: PlatformAnswers | None = None) -> None:
        """Probe the desktop, make the tray if there is one, show the window (or not)."""
        self.set_platform(answers or probe_platform(self.dbus))
        if not self.answers.tray:
            self._tray_poll.start()
            self._hint_no_tray()
        if minimised or self.settings.start_minimised:
            place(self.window, self.settings.window)  # where "Show window" brings it
            if self.tray is None:
                self.window.showMinimized()
        else:
            show_placed(self.window, self.settings.window)

    def set_platform(self, answers: PlatformAnswers) -> None:
        """Take the platform's answers: tray or not, and where notifications go."""
        self.answers = answers
        if answers.tray and self.tray is None:
            self._make_tray()
        self.notifier.set_channel(choose_channel(answers))
        self.app.setQuitOnLastWindowClosed(self.tray is None)
        log.info("tray: %s, notifications: %s", "yes" if self.tray else "no",
                 self.notifier.channel.value)

    def _make_tray(self) -> None:
        tray = TrayController(self)
        tray.show_window_requested.connect(self.show_window)
        tray.free_all_requested.connect(self.free_all)
        tray.unload_idle_requested.connect(self.unload_idle)
        tray.pause_alerts_requested.connect(self.pause_alerts)
        tray.quit_requested.connect(self.quit)
        settings_action = tray.menu.addAction("Settings…")
        tray.menu.insertAction(tray.pause_action, settings_action)
        settings_action.triggered.connect(self.open_settings)
        self.tray = tray
        self.notifier.tray = tray
        tray.icon.messageClicked.connect(self.show_window)
        tray.icon.messageClicked.connect(self.notifier.tray_clicked)
        self._refresh_tray()
        tray.show()

    def _poll_tray(self) -> None:
        answers = probe_platform(self.dbus)
        if answers.tray and self.tray is None:
            self._tray_poll.stop()
            self.set_platform(answers)
            self.window.hint_banner.hide()
            self.window.add_activity(ActivityEntry(
                time.time(), "", "", "System tray found",
                "closing the window now keeps VRAM Steward in the tray", kind="setting"))
        elif answers != self.answers:
            self.set_platform(answers)

    def _hint_no_tray(self) -> None:
        if self.settings.no_tray_hint_shown:
            return
        where = ("desktop notifications" if self.notifier.channel is Channel.DBUS
                 else "a banner in this window")
        self.window.hint_banner.show_message(
            "No system tray on this desktop",
            f"Alerts arrive as {where}, and closing the window quits {APP_NAME}. "
            "On GNOME, the “AppIndicator and KStatusNotifierItem Support” extension adds a "
            "tray; VRAM Steward uses it as soon as it appears.", kind="hint")
        self.settings.no_tray_hint_shown = True
        self.save()

    # -- snapshots --------------------------------------------------------------------------
    def on_snapshot(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        self.hosts.on_snapshot(snapshot)
        ids = tuple(g.display_id for g in every_gpu(snapshot))
        if ids != self._gpu_ids:
            self._gpu_ids = ids
            self._apply_alert_settings()
        reports = new_reports(snapshot)
        for key, r in reports.items():
            self._reported[key] = r.id
        while len(self._reported) > 64:
            self._reported.pop(next(iter(self._reported)))
        for alert in self.policy.evaluate(snapshot):
            report_id = None
            if alert.kind == "oom" and alert.pid is not None:
                report = reports.pop((alert.host, alert.pid), None)
                report_id = report.id if report is not None \
                    else self._reported.get((alert.host, alert.pid))
            self._alert(alert, report_id)
        cfg = self.policy.config
        if cfg.enabled and cfg.oom_alerts and not self.policy.paused(snapshot.monotonic):
            for (host, _pid), r in reports.items():  # its count's alert came earlier (or later)
                self._alert(report_alert(r, snapshot.monotonic, host), r.id)
        self._retract_banner(snapshot)
        self._retract_full_soon(snapshot)
        self._notice_auto_unload(snapshot)
        if self.tray is not None and time.monotonic() - self._tray_refreshed >= TRAY_REFRESH_S:
            self._refresh_tray()

    def _refresh_tray(self) -> None:
        if self.tray is None:
            return
        self._tray_refreshed = time.monotonic()
        snapshot = self._latest
        self.tray.update(snapshot)
        agents = len(snapshot.agents) if snapshot is not None and snapshot.agents else 0
        idle = idle_models(snapshot, self.settings.auto_unload.min_idle_s)
        self.tray.set_agent_actions(agents, len(idle), len(freeable(snapshot)))

    def _alert(self, alert: Alert, report_id: str | None = None) -> None:
        channel = self.notifier.notify(alert, report_id)
        if alert.kind == "full_soon" and alert.display_id is not None:
            self._full_soon.add(alert.display_id)
        if report_id is None:  # a report has its own Activity row (the window's)
            self.window.add_activity(ActivityEntry(
                time.time(), "", "", alert.title, alert.message, detail=alert.message,
                error=alert.kind not in ("memory", "full_soon"), kind="alert"))
        log.info("alert (%s): %s", channel.value, alert.title)
        self.alerted.emit(alert, channel.value)

    def _retract_banner(self, snapshot: Snapshot) -> None:
        """The banner's memory alert goes once its GPU is below the re-arm level again,
        or gone (not merely unread: the source failing says nothing of it); a process's
        alert (an OOM) stays until dismissed."""
        banner = self.window.alert_banner
        alert = banner.alert
        if banner.isHidden() or alert is None or alert.kind != "memory" \
                or alert.display_id is None:
            return
        gone = snapshot.error is None and alert.display_id not in self._gpu_ids
        if gone or self.policy.rearmed(alert.display_id):
            banner.retract()

    def _retract_full_soon(self, snapshot: Snapshot) -> None:
        """A "full in ~N min" warning goes (notification closed, banner hidden) once
        no current diagnosis says so of its GPU any more."""
        if not self._full_soon or snapshot.error is not None:
            return
        # A disconnected host's last findings still hold: nothing is known to have changed.
        held = {d.gpu for _view, own in each_host(snapshot) for d in own.diagnoses
                if d.kind == "full_soon"}
        for did in sorted(self._full_soon - held):
            self._full_soon.discard(did)
            self.notifier.retract("full_soon", did, host=split_id(did)[0])

    def open_report(self, report_id: str) -> None:
        """A notification's "Open report": the window, and the report in its dialog."""
        self.show_window()
        self.window.open_oom_report(report_id)

    def _apply_alert_settings(self) -> None:
        base, per_gpu = alert_configs(self.settings.alerts, self._latest)
        self.policy.config = base
        self.policy.per_gpu = per_gpu

    # -- the first automatic unload ------------------------------------------------------------
    def _notice_auto_unload(self, snapshot: Snapshot) -> None:
        """The run's first automatic unload that went through gets a notice with
        "Reload now" and "Turn off auto-unload"; later ones are told by the Activity
        log and the Auto-unload control only."""
        if self.auto_unload_noticed:
            return
        for update in snapshot.policy_decisions:
            d = update.decision
            if d.kind != POLICY_UNLOAD or not d.done or not d.unloaded:
                continue
            self.auto_unload_noticed = True
            self._auto_unloaded = tuple((a.pid, a.model, a.name, a.device)
                                        for a, _ in d.unloaded)
            did = next((g.display_id for g in snapshot.gpus
                        if (d.gpu_uuid and g.uuid == d.gpu_uuid)
                        or (not d.gpu_uuid and g.index == d.gpu)), str(d.gpu))
            title, body = notice_texts(d, gpu_text(did), lambda pid: label_of(snapshot, pid))
            channel = self.notifier.notify_actions(
                AUTO_UNLOAD_NOTICE, title, body,
                [(RELOAD_NOW, "Reload now"), (AUTO_UNLOAD_OFF, "Turn off auto-unload")])
            log.info("auto-unload notice (%s): %s", channel.value, title)
            return

    def _on_notice_action(self, key: str, action: str) -> None:
        if key != AUTO_UNLOAD_NOTICE:
            return
        if action == RELOAD_NOW:
            for pid, model, name, device in self._auto_unloaded:
                self.controller.submit(Reload(pid, model, name, device))
        elif action == AUTO_UNLOAD_OFF:
            self.turn_off_auto_unload()

    def turn_off_auto_unload(self) -> None:
        """As the control's checkbox does: the policy off, the setting saved."""
        self.window.set_auto_unload(
            dataclasses.replace(self.settings.auto_unload, enabled=False))
        self.save()

    # -- actions ----------------------------------------------------------------------------
    def show_window(self) -> None:
        from app.ui.shell.single_instance import raise_window

        raise_window(self.window)

    def free_caches(self, display_id: str = "") -> None:
        """Free the caches on GPU ``display_id`` (a notification's button), or of every
        process with an agent ("" : the tray)."""
        self.controller.submit(FreeCache.on_gpu(display_id) if display_id
                               else FreeCache.everywhere())

    def free_all(self) -> None:
        """The tray's "Free all": every agent's cache, and each model server's models
        that are not generating, unloaded through the server's API (a refused one is
        skipped: the controller says why)."""
        snapshot = self._latest
        if snapshot is not None and snapshot.agents:
            self.controller.submit(FreeCache.everywhere())
        for server, model in freeable(snapshot):
            self.controller.submit(Unload(server.pid, model.id, reason="manual", name=model.name,
                                          size=model.vram_bytes))

    def unload_idle(self) -> None:
        self.controller.submit(UnloadIdle(self.settings.auto_unload.min_idle_s))

    def pause_alerts(self, paused: bool) -> None:
        if paused:
            # On the snapshots' clock: the policy compares with snapshot.monotonic.
            now = self._latest.monotonic if self._latest is not None else time.monotonic()
            self.policy.pause(now + PAUSE_S)
            self._pause_timer.start(int(PAUSE_S * 1000))
        else:
            self.policy.resume()
            self._pause_timer.stop()
        if self.tray is not None:
            self.tray.set_paused(paused)

    def quit(self) -> None:
        self.quitting = True
        self.remember_window()
        if self.tray is not None:
            self.tray.hide()
        self.window.close()
        self.app.quit()

    # -- window behaviour ---------------------------------------------------------------
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        if obj is self.window and event.type() == QEvent.Type.Close and not self.quitting:
            if self.tray is not None and self.tray.icon.isVisible() and self.settings.close_to_tray:
                event.ignore()
                self.remember_window()
                self.window.hide()
                if not self.settings.close_hint_shown:
                    self.tray.message(f"{APP_NAME} is still running",
                                      "It keeps watching your GPUs from the tray. "
                                      "Choose Quit in the tray menu to stop it.")
                    self.settings.close_hint_shown = True
                    self.save()
                return True
            self.quitting = True
            self.remember_window()
            QTimer.singleShot(0, self.app.quit)
        return False

    def remember_window(self) -> None:
        """Keep the window's size, position and maximised state for the next start."""
        placement = remember(self.window, self.settings.window)
        if placement != self.settings.window:
            self.settings.window = placement
            self.save()

    # -- settings -------------------------------------------------------------------------
    def gpu_entries(self) -> list[GpuEntry]:
        """Every GPU the alerts watch, remote ones naming their host."""
        return [GpuEntry(g.uuid or g.display_id, gpu_line(g).rsplit(" · ", 1)[0])
                for g in every_gpu(self._latest)]

    def make_dialog(self) -> SettingsDialog:
        supported = self.autostart is not None and self.autostart.is_supported()
        return SettingsDialog(
            self.settings, self.gpu_entries(), tray_available=self.tray is not None,
            autostart_supported=supported,
            autostart_enabled=bool(supported and self.autostart.is_enabled()),
            autostart_where=self.autostart.location() if supported else "",
            parent=self.window)

    def open_settings(self) -> None:
        dialog = self.make_dialog()
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.apply_settings(dialog.settings(), dialog.autostart
                                if dialog.autostart_box.isEnabled() else None)
        dialog.deleteLater()

    def apply_settings(self, new: UiSettings, autostart: bool | None = None) -> None:
        old = self.settings
        self.window.settings = new
        if self.sampler is not None and new.sample_period_s != old.sample_period_s:
            self.sampler.set_period(new.sample_period_s)
        if self.theme is not None and new.theme != old.theme:
            self.theme.apply(new.theme)
        if new.auto_unload != old.auto_unload:
            self.window.set_auto_unload(new.auto_unload)
        if new.hosts != old.hosts:
            self.hosts.watch(new.hosts)
        self._apply_alert_settings()
        if autostart is not None and self.autostart is not None:
            self._set_autostart(autostart)
        self.save()
        self.settings_applied.emit(new)

    def _set_autostart(self, on: bool) -> None:
        from app.core.autostart import default_command

        try:
            if on and not self.autostart.is_enabled():
                self.autostart.enable(default_command(minimised=True))
            elif not on and self.autostart.is_enabled():
                self.autostart.disable()
        except OSError as exc:
            self.window.add_activity(ActivityEntry(
                time.time(), "", "", "Start at login: not changed", str(exc), error=True,
                kind="setting"))

    def save(self) -> None:
        if self.store is not None and not self.store.save(self.settings):
            log.warning("settings could not be written to %s", self.store.path)


__all__ = ["DesktopShell", "alert_configs", "new_reports", "report_alert"]
