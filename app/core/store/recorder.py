"""``HistoryRecorder``: what the sampler thread calls, and the writer thread.

:meth:`HistoryRecorder.observe` runs on the sampler thread and only appends
the (immutable) snapshot to a bounded queue: no I/O, no copy.  The writer
thread takes the lock, opens the database (moving a damaged or foreign file
aside), folds ticks into tier rows and commits at least every
``commit_every_s`` (1 s), so a crash loses at most the last second or two.

Whatever goes wrong is reported once through ``message`` (and the optional
``on_message`` callback, called on the writer thread) and never raised into
the sampler.  A full disk stops nothing: the seconds it cannot write are lost,
the log says so once when writing starts failing and once when it works
again, and a database that cannot be opened for want of space is opened again
every ``OPEN_RETRY_S``.  Any other failure to open ends the recording.
"""

from __future__ import annotations

import collections
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable

from app.core.monitor.samples import Snapshot
from app.core.paths import ensure_private_dir, private_state_dir, state_dir
from app.core.store.aggregate import Aggregator
from app.core.store.lock import WriterLock, lock_path
from app.core.store.schema import ForeignDatabase, open_writer, out_of_space
from app.core.store.tiers import PRUNE_EVERY_S, Retention
from app.core.store.writer import HistoryWriter

log = logging.getLogger(__name__)

MAX_QUEUED_TICKS = 1200  # 5 min at 250 ms: a stalled disk drops ticks, never grows memory
OPEN_RETRY_S = 5.0  # a database that could not be opened on a full disk is tried again
READ_ONLY_MESSAGE = ("History is being recorded by another VRAM Steward instance; "
                     "this one shows it but records nothing.")


class HistoryRecorder:
    """Records the snapshots of ``sources`` (default: real GPUs, never the demo)."""

    def __init__(self, db_path: str, retention: Retention | None = None,
                 commit_every_s: float = 1.0, sources: Iterable[str] | None = ("nvml",),
                 on_message: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.db_path = db_path
        self._clock = clock  # epoch seconds, for pruning
        self.commit_every_s = commit_every_s
        self.on_message = on_message
        self.message: str | None = None
        self.read_only = False
        self.recording = True
        self._retention = retention or Retention()
        self._sources = None if sources is None else frozenset(sources)
        self._ticks: collections.deque[Snapshot] = collections.deque(maxlen=MAX_QUEUED_TICKS)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._message_taken = False
        self._failing = False  # writes fail (a full disk) until one works again
        self._lock = WriterLock(lock_path(db_path))
        self._thread = threading.Thread(target=self._run, name="vram-steward-history",
                                        daemon=True)
        self._thread.start()

    # -- sampler thread -------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> None:
        """Queue one tick.  O(1): the writer thread does the rest."""
        if self._stop.is_set() or self.read_only or not self.recording:
            return
        if self._sources is not None and snapshot.source not in self._sources:
            return
        self._ticks.append(snapshot)

    # -- any thread -----------------------------------------------------------
    def apply(self, keep: bool, retention: Retention) -> None:
        """New settings: record or not ("Keep history"), and the retention,
        applied at the next prune (within a second)."""
        self.recording = keep
        self._retention = retention
        self._prune_now = True

    def wait_ready(self, timeout_s: float = 5.0) -> bool:
        """Until the database is open (or found unwritable); True when it is."""
        self._ready.wait(timeout_s)
        return self._ready.is_set() and not self.read_only and self.message is None

    def take_message(self) -> str | None:
        """The message, once: for a UI that shows it once."""
        if self.message is None or self._message_taken:
            return None
        self._message_taken = True
        return self.message

    def close(self, timeout_s: float = 5.0) -> None:
        """Commit what is queued and stop the writer thread."""
        self._stop.set()
        self._thread.join(timeout_s)

    # -- writer thread --------------------------------------------------------
    _prune_now = True

    def _report(self, text: str) -> None:
        log.warning("%s", text)
        if self.message is None:
            self.message = text
            if self.on_message is not None:
                try:
                    self.on_message(text)
                except Exception:
                    log.exception("history message callback failed")

    def _run(self) -> None:
        writer = self._open_when_possible()
        if writer is None:
            self._ticks.clear()
            return
        try:
            self._loop(writer)
        finally:
            writer.conn.close()
            self._lock.release()

    def _open_when_possible(self) -> HistoryWriter | None:
        """The writer, or None (another instance writes, a failure, closed);
        ready is set after the first try, whatever its outcome."""
        while True:
            try:
                writer = self._open()
            except Exception as exc:  # never into the sampler: report it
                if out_of_space(exc):
                    self._failed(f"History is not recorded until there is space: {exc}")
                    self._ready.set()
                    if self._stop.wait(OPEN_RETRY_S):
                        return None
                    continue
                self._report(f"History is not recorded: {exc}")
                writer = None
            self._ready.set()
            return writer

    def _open(self) -> HistoryWriter | None:
        folder = os.path.dirname(os.path.abspath(self.db_path))
        if folder == os.path.abspath(state_dir()):
            private_state_dir()  # created 0700, checked: nothing is written in another
        else:
            ensure_private_dir(folder)
        if not self._lock.acquire():
            self.read_only = True
            self._report(READ_ONLY_MESSAGE)
            return None
        try:
            conn = self._connect()
        except BaseException:
            self._lock.release()
            raise
        self._recovered()
        return HistoryWriter(conn, self._retention)

    def _connect(self) -> sqlite3.Connection:
        try:
            return open_writer(self.db_path)
        except ForeignDatabase as exc:
            moved = move_aside(self.db_path)
            self._report(f"The history file was unreadable ({exc}); it was moved to "
                         f"{moved} and a new history was started.")
            return open_writer(self.db_path)

    def _loop(self, writer: HistoryWriter) -> None:
        aggregator = Aggregator()
        last_commit = last_prune = time.monotonic()
        while True:
            stopping = self._stop.wait(min(0.25, self.commit_every_s))
            while self._ticks:
                aggregator.add(self._ticks.popleft())
            now = time.monotonic()
            if stopping or now - last_commit >= self.commit_every_s:
                last_commit = now
                self._commit(writer, aggregator, stopping)
            if self._prune_now or now - last_prune >= PRUNE_EVERY_S:
                self._prune_now = False
                last_prune = now
                writer.retention = self._retention
                self._guarded(lambda: writer.prune(self._clock()))
            if stopping:
                return

    def _commit(self, writer: HistoryWriter, aggregator: Aggregator, everything: bool) -> None:
        batch = aggregator.take(everything)
        if batch.rows and self._guarded(lambda: writer.write(batch)):
            self._recovered()  # only rows written prove the disk takes them again

    def _guarded(self, action: Callable[[], None]) -> bool:
        try:
            action()
        except sqlite3.Error as exc:  # disk full, file removed: lose these rows, keep going
            self._failed(f"Writing the history failed: {exc}; the seconds until it works "
                         "again are not kept.")
            return False
        return True

    def _failed(self, text: str) -> None:
        """Report the first failure of an outage only, not one a second."""
        if not self._failing:
            self._failing = True
            self._report(text)

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("Writing the history works again.")


def move_aside(path: str) -> str:
    """Rename a damaged or foreign database (and its WAL files) to
    ``<path>.corrupt-<timestamp>``; returns the new name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = f"{path}.corrupt-{stamp}"
    n = 1
    while os.path.exists(target):
        n += 1
        target = f"{path}.corrupt-{stamp}-{n}"
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, target + suffix)
    return target
