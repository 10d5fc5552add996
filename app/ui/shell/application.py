"""Wiring: QApplication, sampler thread, history and main window.

``--screenshot FILE`` builds the same window on the offscreen platform, lets the
sampler run for ``--after`` seconds and saves a PNG: a way to look at the real
window on a machine with no display (CI, SSH).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app import APP_NAME, __version__
from app.ui.settings.host_list import watched_hosts

if TYPE_CHECKING:
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.core.monitor.history import History
    from app.core.monitor.source import GpuSource
    from app.core.remote.host_config import HostConfig
    from app.core.store.recorder import HistoryRecorder
    from app.ui.settings.store import SettingsStore
    from app.ui.settings.values import UiSettings
    from app.ui.shell.desktop import DesktopShell
    from app.ui.shell.sampler import Sampler
    from app.ui.style.theme import ThemeManager
    from app.ui.window.main_window import MainWindow

RESOURCES = Path(__file__).resolve().parents[3] / "resources"


def app_icon() -> QIcon:
    from PySide6.QtGui import QIcon

    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
        png = RESOURCES / "icons" / f"vram-steward-{size}.png"
        if png.exists():
            icon.addFile(str(png))
    svg = RESOURCES / "icons" / "vram-steward.svg"
    if icon.isNull() and svg.exists():
        icon.addFile(str(svg))
    return icon


def _source_factory(demo: bool, seed: int, size: tuple[int, int] | None = None
                    ) -> Callable[[], GpuSource]:
    if demo:
        from app.core.monitor.demo_source import demo_source

        return lambda: demo_source(size, seed)
    from app.core.monitor.nvml_source import NvmlSource

    return NvmlSource


def run_gui(demo: bool = False, period_s: float | None = None, screenshot: str | None = None,
            after_s: float = 2.0, seed: int = 7, minimised: bool = False,
            theme: str | None = None, size: tuple[int, int] | None = None,
            demo_size: tuple[int, int] | None = None,
            hosts: Sequence[HostConfig] = ()) -> int:
    """The app.  ``period_s`` and ``theme`` override the saved settings for this run
    only; ``screenshot`` renders offscreen at ``size`` (width, height), reads the
    settings but never writes them, and runs beside an open instance instead of
    raising it.  ``demo_size`` (GPUs, processes per GPU) scales the demo.
    ``hosts``: remote hosts watched for this run, beside the saved ones (the
    demo watches none: it tells its own story)."""
    started = time.perf_counter()
    if screenshot:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication

    from app.core.control.controller import AppController
    from app.core.control.hosts import HostControllers
    from app.core.monitor.history import History, HistoryConfig
    from app.core.remote.fleet import Fleet
    from app.ui.settings.store import SettingsStore
    from app.ui.shell.controller import ControllerAdapter
    from app.ui.shell.memory import return_big_blocks
    from app.ui.shell.qt_compat import guard_singleton_refcounts
    from app.ui.shell.sampler import Sampler, clamp_period
    from app.ui.style.theme import ThemeManager
    from app.ui.window.main_window import MainWindow

    guard_singleton_refcounts()
    return_big_blocks()  # plot refreshes' big arrays go back to the system when freed
    if screenshot:
        _quiet_offscreen()
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    qt_app.setApplicationName(APP_NAME)
    qt_app.setApplicationVersion(__version__)
    qt_app.setOrganizationName("vram-steward")
    qt_app.setDesktopFileName("vram-steward")
    qt_app.setWindowIcon(app_icon())

    instance = None
    if not screenshot:
        from app.ui.shell.single_instance import SingleInstance

        instance = SingleInstance(qt_app)
        if not instance.claim(argv=sys.argv[1:]):
            answered = instance.reply is not None and instance.reply.ok
            print(f"{APP_NAME} is already running; "
                  + ("its window was raised." if answered
                     else "it will show its window once it has started."))
            return 0

    store = SettingsStore()
    settings = store.load()
    themes = ThemeManager(qt_app)
    themes.apply(theme or settings.theme)
    period_s = clamp_period(period_s if period_s is not None else settings.sample_period_s)
    history = History(HistoryConfig(period_s=period_s, fine_span_s=settings.history_s))
    # Every verb (free cache, gc, unload, reload, pin, idle timer, auto-unload settings)
    # goes through one controller: it runs them on its worker threads against the
    # sampler's current agent directory (it changes with the source); the window, the
    # tray and notifications send it requests.
    # The stored history: read on the sampler thread before its first tick, written
    # by the recorder's own thread; none for the demo or a screenshot (see _history_store).
    recorder, load_history = _history_store(settings, history, enabled=not (demo or screenshot))
    # Remote hosts: each on a thread of its own; every snapshot carries their views.
    fleet = Fleet(watched_hosts(settings.hosts, hosts) if not demo else ())
    sampler = Sampler(_source_factory(demo, seed, demo_size), period_s, recorder=recorder,
                      load_history=load_history, fleet=fleet)
    controller = ControllerAdapter(HostControllers(AppController(lambda: sampler.agents),
                                                   fleet.directory))
    window = MainWindow(history, settings=settings, controller=controller)
    window.idle_when_unseen = True  # in the tray or minimised: sampled, recorded, not drawn
    window.cli_hosts = tuple(hosts)
    if store.notice:  # values of the settings file that could not be read: defaults used
        window.show_notice(store.notice)
    sampler.history_loaded.connect(lambda stored: _seed(window, stored, recorder))
    sampler.snapshot_ready.connect(window.on_snapshot)
    sampler.notices_changed.connect(window.show_folder_notices)
    window.demo_requested.connect(
        lambda: sampler.switch_source(_source_factory(True, seed, demo_size)))
    window.retry_requested.connect(sampler.retry)
    # The memory-pressure policy runs in the sampler's Collector (it decides on every
    # snapshot and unloads on a thread of its own); the controller applies the
    # Auto-unload settings to it, again when the source (and so the runner) changes;
    # its decisions arrive with the snapshots.
    window.set_policy(lambda: sampler.policy)

    if screenshot:
        rc = _screenshot(window, sampler, Path(screenshot), after_s, started, size)
    else:
        shell = _desktop_shell(qt_app, window, sampler, store, themes)
        if recorder is not None:
            shell.settings_applied.connect(
                lambda new: recorder.apply(new.stored_history.keep,
                                           new.stored_history.retention()))
        if instance is not None:
            instance.raise_requested.connect(lambda _argv: shell.show_window())
        sampler.start()
        shell.start(minimised=minimised)
        _quit_on_termination(qt_app, shell.quit)
        rc = qt_app.exec()
        if instance is not None:
            instance.close()
    # An agent that never answers keeps a worker of the controller busy (up to its
    # timeout): like a stuck sampler, it must not hold the app open.
    stuck = not controller.wait(2.0)
    controller.core.close()
    sampler_stopped = sampler.stop()
    if recorder is not None:
        recorder.close()  # commits the last ticks
    if not sampler_stopped or stuck:
        # A driver call that never returns (a GPU lost mid-call) keeps the
        # sampler thread busy; don't let it hold the app open or crash teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _history_store(settings: UiSettings, history: History, enabled: bool
                   ) -> tuple[HistoryRecorder | None, Callable[[], object] | None]:
    """The recorder and the start-up loader of the stored history, or neither:
    ``--demo`` and ``--screenshot`` never read or write the user's history (a
    demo is not their GPUs; a screenshot must not wait on a big file), nor does
    a run with "Keep history" off."""
    if not (enabled and settings.stored_history.keep):
        return None, None
    from app.core.paths import history_db_path
    from app.core.store.query import read_history
    from app.core.store.recorder import HistoryRecorder

    path = history_db_path()
    recorder = HistoryRecorder(path, settings.stored_history.retention())
    span_s = history.config.coarse_span_s

    def load() -> object:  # on the sampler thread
        recorder.wait_ready(2.0)  # a damaged file is moved aside before it is read
        return read_history(path, time.time() - span_s)

    return recorder, load


def _seed(window: MainWindow, stored: object, recorder: HistoryRecorder | None) -> None:
    """The window's history opens with the stored one; one message if the store
    could not be used (moved aside, another instance writes, unreadable)."""
    from app.core.store.query import StoredHistory

    if not isinstance(stored, StoredHistory):
        return
    window.history.seed(stored)
    message = (recorder.take_message() if recorder is not None else None) or stored.error
    if message:
        window.show_notice(message)


def _quiet_offscreen() -> None:
    """A screenshot prints its own lines only: the offscreen platform's note that
    it cannot pass size hints to a window manager (it has none) is dropped;
    every other Qt message goes to stderr as Qt would print it."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(_mode: object, _context: object, message: str) -> None:
        if "propagateSizeHints" not in message:
            print(message, file=sys.stderr, flush=True)

    qInstallMessageHandler(handler)


#: The socket pair and notifier through which a signal wakes the event loop.
_SIGNAL_WAKEUP: list[object] = []


def _quit_on_termination(qt_app: QApplication, quit_app: Callable[[], None]) -> None:
    """SIGTERM (logout, ``kill``, a service manager, ``timeout``), SIGINT
    (Ctrl+C in a terminal) and SIGHUP (the terminal closed) end the app the
    way the tray's Quit does (``quit_app``: not a window close, which a tray
    turns into "hide"): the sampler stops, the history is flushed and NVML
    shuts down cleanly.  Python runs a signal's handler only once it holds
    the interpreter again: the signal's byte on a socket Qt watches wakes the
    event loop at once, and an idle app is never woken for nothing."""
    import signal
    import socket

    from PySide6.QtCore import QSocketNotifier, QTimer

    reader, writer = socket.socketpair()
    for end in (reader, writer):
        end.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def drain() -> None:
        try:
            while reader.recv(64):
                pass
        except OSError:
            pass

    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, qt_app)
    notifier.activated.connect(drain)
    _SIGNAL_WAKEUP[:] = [reader, writer, notifier]  # kept for the app's life
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, lambda _signum, _frame: QTimer.singleShot(0, quit_app))


def _desktop_shell(qt_app: QApplication, window: MainWindow, sampler: Sampler,
                   store: SettingsStore, themes: ThemeManager) -> DesktopShell:
    from app.core.autostart import autostart_for_platform
    from app.ui.shell.desktop import DesktopShell

    dbus = None
    try:
        from app.ui.shell.dbus_notify import DbusNotifier

        dbus = DbusNotifier(qt_app)
    except ImportError:  # a Qt build without QtDBus (Windows, macOS wheels)
        dbus = None
    shell = DesktopShell(qt_app, window, sampler, store, themes, dbus, autostart_for_platform(),
                         controller=window.controller)
    sampler.snapshot_ready.connect(shell.on_snapshot)
    # The window's own Auto-unload control edits the same settings: keep them saved.
    window.auto_unload.settings_changed.connect(lambda _s: shell.save())
    return shell


def _screenshot(window: MainWindow, sampler: Sampler, path: Path,
                after_s: float, started: float, size: tuple[int, int] | None = None) -> int:
    from PySide6.QtCore import QEventLoop, QTimer

    result = {"rc": 1}
    # A local loop, not the application's: ending it leaves the QApplication as it
    # was (quit() would mark the whole application as closing down).
    loop = QEventLoop()
    if size is not None:
        window.resize(*size)  # never below the window's minimum size
    window.show()
    sampler.start()

    def first_frame() -> None:
        # Time to the first drawn frame with real data, for the start-up benchmark.
        if os.environ.get("VRAM_STEWARD_REPORT_FIRST_FRAME"):
            print(f"first-frame {time.perf_counter() - started:.3f}", file=sys.stderr, flush=True)

    def on_first(_snapshot: object) -> None:
        sampler.snapshot_ready.disconnect(on_first)
        QTimer.singleShot(0, lambda: (window.refresh(), window.grab(), first_frame()))

    sampler.snapshot_ready.connect(on_first)

    def save() -> None:
        # Whatever goes wrong, the event loop must end: an exception here
        # would otherwise leave the app running with nothing left to do.
        try:
            window.refresh()
            shown = (window.width(), window.height())
            if size is not None and shown != size:
                print(f"vram-steward: the window cannot be {size[0]}x{size[1]}; "
                      f"the screenshot is {shown[0]}x{shown[1]}", file=sys.stderr)
            ok = window.grab().save(str(path))
            result["rc"] = 0 if ok else 1
            if not ok:
                print(f"vram-steward: could not write the screenshot {path}", file=sys.stderr)
        except OSError as exc:
            print(f"vram-steward: could not write the screenshot {path}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
        finally:
            loop.quit()

    QTimer.singleShot(int(max(0.0, after_s) * 1000), save)
    loop.exec()
    return result["rc"]
