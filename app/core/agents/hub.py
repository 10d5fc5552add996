"""Real agents: registry scans, one persistent connection per agent, reports.

Qt-free; plain threads.  One scanner thread re-reads the registry about once a
second (every private runtime dir of ours: the default and the fallbacks
beside it; listdir + a stat per file; a file is parsed again only when it
changed; stale entries are pruned) and keeps one worker thread per live agent.
The folders it refuses come back as lines from ``notices()`` (no I/O).
Each worker owns its connection and asks for ``report`` every period under its
own timeout, so a hung agent only ever delays itself.  ``reports()`` returns a
copy of the latest reports without any I/O.

Model actions (``unload``, ``reload``, ``pin``, ``set_idle_unload``) and
``record`` open a connection of their own under their own (long) timeout, so a 2 GB unload never
holds up the pollers; their replies' events and every report's ``events`` go
into one deduplicated log that ``events_since(cursor)`` reads.
"""

from __future__ import annotations

import logging
import threading
import time

from app.agent import protocol
from app.core.agents import client as agent_client
from app.core.agents import registry as agent_registry
from app.core.agents.connection import AgentConnection, AgentError, AgentUnavailable
from app.core.agents.directory import AgentDirectory
from app.core.agents.event_log import ModelEventLog
from app.core.agents.recording import RecordResult
from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
)

log = logging.getLogger(__name__)


class _Worker:
    """Polls one agent; runs in its own daemon thread."""

    def __init__(self, hub: AgentHub, entry: AgentEntry) -> None:
        self.hub = hub
        self.entry = entry
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"agent-{entry.pid}", daemon=True)
        self.conn: AgentConnection | None = None

    def _run(self) -> None:
        hub, pid = self.hub, self.entry.pid
        next_at = time.monotonic()
        while not self.stop.is_set():
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = AgentConnection(self.entry, hub.connect_timeout_s)
                started = time.perf_counter()
                data = self.conn.call("report", {"models": True}, hub.report_timeout_s)
                rtt = time.perf_counter() - started
                report = AgentReport.from_json(data, received_at=time.time(), round_trip_s=rtt)
                if report is None:
                    hub._set_error(pid, "malformed report")
                else:
                    hub._set_report(self.entry, report)
            except (AgentUnavailable, AgentError) as exc:
                hub._set_error(pid, str(exc))
            except Exception as exc:  # a bug: keep polling, but say so
                log.exception("polling agent %s failed", pid)
                hub._set_error(pid, f"{type(exc).__name__}: {exc}")
            next_at = max(next_at + hub.period_s, time.monotonic() + hub.period_s / 4)
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        if self.conn is not None:
            self.conn.close()


def _same_agent(a: AgentEntry, b: AgentEntry) -> bool:
    return (a.pid, a.address, a.create_time) == (b.pid, b.address, b.create_time)


def _no_agent(pid: int, model: str) -> ModelActionResult:
    return ModelActionResult(pid, model, False, error="no agent in that process",
                             code=protocol.NOT_FOUND)


class AgentHub(AgentDirectory):
    #: A report that takes longer is skipped this round (the connection stays).
    report_timeout_s = 1.0
    connect_timeout_s = 1.0

    def __init__(self, runtime_dir: str | None = None, period_s: float = 0.25,
                 registry_period_s: float = 1.0, all_users: bool = False) -> None:
        """``all_users``: every user's agents, not only ours (root: the system
        service reads them all; each agent is checked to be its owner's)."""
        self.runtime_dir = runtime_dir
        self.all_users = all_users
        self.period_s = period_s
        self.registry_period_s = registry_period_s
        self._lock = threading.Lock()
        self._reports: dict[int, AgentReport] = {}
        self._errors: dict[int, str] = {}
        self._entries: dict[int, AgentEntry] = {}
        self._workers: dict[int, _Worker] = {}
        self._cache: agent_registry.EntryCache = {}
        self._notices: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events = ModelEventLog()

    # -- AgentDirectory
    def reports(self) -> dict[int, AgentReport]:
        with self._lock:
            return dict(self._reports)

    def errors(self) -> dict[int, str]:
        """Last polling error per pid (cleared by the next good report)."""
        with self._lock:
            return dict(self._errors)

    def entries(self) -> list[AgentEntry]:
        if self._thread is None:
            scan = agent_registry.scan_registry(self.runtime_dir, all_users=self.all_users)
            with self._lock:
                self._notices = scan.notices
            return scan.entries
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: e.pid)

    def notices(self) -> list[str]:
        with self._lock:
            return list(self._notices)

    def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
        entry = self._entry_for(pid)
        if entry is None:
            return FreeCacheResult(pid=pid, ok=False, error="no agent in that process")
        return agent_client.free_cache(entry, timeout_s)

    def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
        entry = self._entry_for(pid)
        if entry is None:
            return {"ok": False, "collected": None, "seconds": None,
                    "error": "no agent in that process"}
        return agent_client.collect_garbage(entry, timeout_s)

    # -- model manager (each call opens its own connection: pollers never wait)
    def unload(self, pid: int, model: str, to: str | None = "cpu", force: bool = False,
               reason: str = "manual",
               timeout_s: float = agent_client.MODEL_ACTION_TIMEOUT_S) -> ModelActionResult:
        entry = self._entry_for(pid)
        if entry is None:
            return _no_agent(pid, model)
        return self._note(entry, agent_client.unload(entry, model, to, force, reason, timeout_s))

    def reload(self, pid: int, model: str,
               timeout_s: float = agent_client.MODEL_ACTION_TIMEOUT_S) -> ModelActionResult:
        entry = self._entry_for(pid)
        if entry is None:
            return _no_agent(pid, model)
        return self._note(entry, agent_client.reload(entry, model, timeout_s))

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0
            ) -> ModelActionResult:
        entry = self._entry_for(pid)
        if entry is None:
            return _no_agent(pid, model)
        return agent_client.pin(entry, model, pinned, timeout_s)

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        entry = self._entry_for(pid)
        if entry is None:
            return {"ok": False, "idle_unload_s": None, "error": "no agent in that process",
                    "code": protocol.NOT_FOUND}
        return agent_client.set_idle_unload(entry, seconds, timeout_s)

    def record(self, pid: int, seconds: float, max_entries: int | None = None,
               timeout_s: float | None = None) -> RecordResult:
        entry = self._entry_for(pid)
        if entry is None:
            return RecordResult(pid, False, error="no agent in that process",
                                code=protocol.NOT_FOUND)
        return agent_client.record(entry, seconds, max_entries, timeout_s)

    def events_since(self, cursor: int = 0) -> tuple[list[tuple[int, ModelEvent]], int]:
        return self._events.since(cursor)

    def note_reply(self, pid: int, event: ModelEvent) -> None:
        """Replies of this hub's own calls are logged as they return (:meth:`_note`)."""

    def _note(self, entry: AgentEntry, result: ModelActionResult) -> ModelActionResult:
        if result.event is not None:
            self._events.add(entry.pid, (result.event,), key=(entry.pid, entry.create_time))
        return result

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self.scan()
        self._thread = threading.Thread(target=self._run, name="agent-hub", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2.0)
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.stop.set()
        for worker in workers:
            worker.thread.join(timeout=self.report_timeout_s + 1.0)

    # -- internals
    def _entry_for(self, pid: int) -> AgentEntry | None:
        with self._lock:
            entry = self._entries.get(pid)
        if entry is not None:
            return entry
        for entry in agent_registry.read_registry(self.runtime_dir):
            if entry.pid == pid:
                return entry
        return None

    def _set_report(self, entry: AgentEntry, report: AgentReport) -> None:
        with self._lock:
            # Not removed meanwhile.  Compared by what names the agent, not by
            # identity: the agent rewrites its registry file (when torch loads,
            # say) and the scan then holds a new, equal entry.
            now = self._entries.get(entry.pid)
            current = now is not None and _same_agent(now, entry)
            if current:
                self._reports[entry.pid] = report
                self._errors.pop(entry.pid, None)
        if current and report.events:
            self._events.add(entry.pid, report.events, key=(entry.pid, entry.create_time))

    def _set_error(self, pid: int, message: str) -> None:
        with self._lock:
            self._errors[pid] = message

    def _read_entries(self) -> list[AgentEntry]:
        """Every private registry (or ``runtime_dir``'s), parsing only files that
        changed since the last scan."""
        scan = agent_registry.scan_registry(self.runtime_dir, cache=self._cache,
                                            all_users=self.all_users)
        with self._lock:
            self._notices = scan.notices
        return scan.entries

    def scan(self) -> None:
        """One registry pass: start workers for new agents, stop gone ones."""
        live = {e.pid: e for e in self._read_entries()}
        to_stop = []
        to_start = []
        with self._lock:
            for pid, worker in list(self._workers.items()):
                current = live.get(pid)
                if current is None or not _same_agent(current, worker.entry):
                    to_stop.append(self._workers.pop(pid))
                    self._reports.pop(pid, None)
                    self._errors.pop(pid, None)
            for pid in set(self._reports) - set(live):
                self._reports.pop(pid, None)
            self._entries = live
            self._events.forget((e.pid, e.create_time) for e in live.values())
            if not self._stop.is_set():
                for pid, entry in live.items():
                    if pid not in self._workers:
                        worker = _Worker(self, entry)
                        self._workers[pid] = worker
                        to_start.append(worker)
        for worker in to_stop:
            worker.stop.set()
        for worker in to_start:
            worker.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.registry_period_s):
            try:
                self.scan()
            except Exception:
                log.exception("agent registry scan failed")
