"""The model servers on this host, kept current off the GUI thread.

``ServerDirectory`` scans the process list every few seconds (recognition)
and asks each server's API on a small pool of its own, one request in
flight per server, each under a timeout: a server that hangs costs one
worker, never the sampler or the GUI.  ``current(snapshot)`` costs no I/O:
it joins the latest answers with the snapshot's NVML figures (the GPU a
server's processes hold memory on, their SM use) and keeps the idle clocks
(a queue empty since …, Ollama's last request).  Unloads run through
``app.core.servers.unloading`` on the caller's (worker) thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from app.core.monitor.samples import Snapshot
from app.core.servers.adapters import ADAPTERS, Adapter, Probe
from app.core.servers.attribution import BUSY_SM_PERCENT, usage_of
from app.core.servers.host import HostProc, HostReader, local_addresses
from app.core.servers.http import LocalHttp, ServerHttpError
from app.core.servers.keys import ServerKey, key_for, keys_path, read_keys
from app.core.servers.recognise import LABELS, Found, base, recognise
from app.core.servers.types import ModelServer, ServerModel, holding

log = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class _Seen:
    """The latest answer of one server's API."""

    probe: Probe | None = None
    error: str | None = None
    at: float = 0.0
    idle_since: float | None = None  # its queue empty since (epoch s), as we saw it


class ServerDirectory:
    def __init__(self, host_reader: Callable[[], list[HostProc]] | None = None,
                 adapters: dict[str, Adapter] | None = None,
                 keys: list[ServerKey] | None = None, scan_s: float = 3.0,
                 probe_s: float = 1.5, timeout_s: float = 2.0,
                 clock: Callable[[], float] = time.time) -> None:
        """``keys``: the servers' API keys (None: read the user's keys file)."""
        self._host_reader = host_reader or HostReader()
        self.adapters = adapters if adapters is not None else ADAPTERS
        self._notices: list[str] = []
        self._keys_stamp: tuple[float, int] | None = None
        self._keys_from_file = keys is None
        self._keys: list[ServerKey] = keys or []
        if keys is None:
            self._read_keys()
        self.scan_s, self.probe_s, self.timeout_s = scan_s, probe_s, timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self.snapshots = threading.Condition(self._lock)  # notified on each current()
        self._found: dict[int, Found] = {}
        self._seen: dict[int, _Seen] = {}
        self._inflight: set[int] = set()
        # (pid, model) -> (expires_at last seen, first seen, when expires_at last changed)
        self._expires: dict[tuple[int, str], tuple[float | None, float, float | None]] = {}
        self._offloaded: set[tuple[int, str]] = set()  # A1111 checkpoints moved to RAM by us
        self._latest: tuple[ModelServer, ...] = ()
        self.snapshot: Snapshot | None = None
        self.ticks = 0
        self._local: frozenset[str] = frozenset({"127.0.0.1", "::1", "localhost"})
        self._pool: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    # -- running ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="model-servers", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def refresh(self, only: int | None = None) -> None:
        """Scan and probe every server now (``only``: the one holding that pid),
        waiting for the answers (the CLI; the directory's own first round)."""
        self._scan()
        wanted = [f for f in self._found.values() if only is None or only in f.pids]
        if len(wanted) <= 1:
            for found in wanted:
                self._probe(found)
        else:
            with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
                list(pool.map(self._probe, wanted))  # a server that hangs costs one timeout
        if only is None:
            self._ready.set()

    @property
    def ready(self) -> bool:
        """Whether the servers are known: the first scan and every first answer
        (or its timeout) are in.  Until then an empty list means "not yet"."""
        return self._ready.is_set()

    def _loop(self) -> None:
        if not self.ready:  # the first round whole, so the first decisions see every server
            self.refresh()
        next_scan = time.monotonic() + self.scan_s
        while not self._stop.wait(self.probe_s):
            now = time.monotonic()
            if now >= next_scan:
                self._scan()
                next_scan = now + self.scan_s
            for found in list(self._found.values()):
                self._submit(found)

    def _read_keys(self) -> None:
        """The keys file again when it changed (a key kept while the app runs)."""
        try:
            st = os.stat(keys_path())
            stamp: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            stamp = None
        if stamp == self._keys_stamp and self._keys_stamp is not None:
            return
        self._keys_stamp = stamp
        keys, problem = read_keys()
        self._keys = keys
        self._notices = [problem] if problem else []

    def scan(self) -> None:
        """Read the process list and recognise the servers in it (no API asked)."""
        self._scan()

    def _scan(self) -> None:
        if self._keys_from_file:
            self._read_keys()
        try:
            found = recognise(self._host_reader())
            self._local = frozenset(local_addresses()) | {"localhost"}
        except Exception:
            log.exception("scanning for model servers failed")
            return
        with self._lock:
            self._found = {f.pid: f for f in found}
            for pid in list(self._seen):
                if pid not in self._found:
                    del self._seen[pid]
            self._expires = {k: v for k, v in self._expires.items() if k[0] in self._found}

    def _submit(self, found: Found) -> None:
        if self._stop.is_set():
            return
        with self._lock:
            if found.pid in self._inflight:
                return  # still waiting on the last answer: one request per server
            self._inflight.add(found.pid)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="server-probe")
        try:
            self._pool.submit(self._probe, found)
        except RuntimeError:  # closed meanwhile
            with self._lock:
                self._inflight.discard(found.pid)

    def http_for(self, found: Found, timeout_s: float | None = None) -> LocalHttp:
        if found.endpoint is None:
            raise ServerHttpError(found.api_off or "no port found for its API")
        auth = key_for(self._keys, found.kind, found.port) if _trusted(found) else None
        return LocalHttp(found.endpoint, auth, self.timeout_s if timeout_s is None else timeout_s,
                         local=self._local)

    def probe_now(self, found: Found) -> Probe:
        """Ask the server now (blocks up to a few timeouts); raises ServerHttpError."""
        try:
            return self.adapters[found.kind].probe(found, self.http_for(found))
        except ValueError as exc:  # an endpoint that is not this host's
            raise ServerHttpError(str(exc)) from None

    def _probe(self, found: Found) -> None:
        probe, error = None, None
        try:
            probe = self.probe_now(found)
        except ServerHttpError as exc:
            error = str(exc)
            if exc.status in (401, 403) and not _trusted(found) \
                    and key_for(self._keys, found.kind, found.port) is not None:
                error += (f"; the key kept for {LABELS[found.kind]} is sent only to a server "
                          "process of yours seen listening on that port")
        except Exception as exc:  # an adapter bug or a shape it did not expect
            log.debug("probing %s (%d) failed", found.kind, found.pid, exc_info=True)
            error = f"unexpected answer ({type(exc).__name__}: {exc})"
        self.note_probe(found.pid, probe, error)

    def note_probe(self, pid: int, probe: Probe | None, error: str | None) -> None:
        now = self._clock()
        with self._lock:
            self._inflight.discard(pid)
            if pid not in self._found:
                return
            seen = self._seen.setdefault(pid, _Seen())
            seen.probe, seen.error, seen.at = probe, error, now
            if probe is None or probe.busy is not False:
                seen.idle_since = None
            elif seen.idle_since is None:
                seen.idle_since = now

    # -- reading ---------------------------------------------------------------------------
    def notices(self) -> list[str]:
        return list(self._notices)

    def servers(self) -> tuple[ModelServer, ...]:
        """The servers as of the last ``current()``; no I/O."""
        with self._lock:
            return self._latest

    def owner(self, pid: int) -> ModelServer | None:
        return holding(self.servers(), pid)

    def found(self, pid: int) -> Found | None:
        with self._lock:
            return next((f for f in self._found.values() if pid in f.pids), None)

    def current(self, snapshot: Snapshot) -> tuple[ModelServer, ...]:
        """Every server joined with ``snapshot``'s NVML figures; no I/O."""
        with self._lock:
            out = tuple(self._build(found, snapshot) for found in self._found.values())
            self._latest, self.snapshot = out, snapshot
            self.ticks += 1
            self.snapshots.notify_all()
        return out

    def mark_offloaded(self, pid: int, model: str, offloaded: bool) -> None:
        with self._lock:
            (self._offloaded.add if offloaded else self._offloaded.discard)((pid, model))

    def _build(self, found: Found, snapshot: Snapshot) -> ModelServer:
        seen = self._seen.get(found.pid) or _Seen()
        probe = seen.probe
        usage = usage_of(snapshot, found.pids)
        sm_busy = None if usage.sm_percent is None else usage.sm_percent >= BUSY_SM_PERCENT
        adapter = self.adapters.get(found.kind)
        models = []
        for m in (probe.models if probe else ()):
            gpu, busy = usage.only_gpu, sm_busy
            runner = _runner_of(found, m)
            if runner is not None:  # the child holding this model: its GPU, its SMs
                own = usage_of(snapshot, (runner,))
                gpu = own.only_gpu if own.only_gpu is not None else gpu
                if own.sm_percent is not None:
                    busy = own.sm_percent >= BUSY_SM_PERCENT
                else:  # no sample for it while its siblings have one: no kernels ran
                    busy = False if usage.sm_percent is not None else None
            model = self._model(found, m, probe, seen, gpu, busy)
            models.append(dataclasses.replace(model, pid=runner) if runner else model)
        busy = probe.busy if probe and probe.busy is not None else (
            True if any(m.busy for m in models) else None)
        return ModelServer(
            kind=found.kind, label=LABELS[found.kind], pid=found.pid, pids=found.pids,
            user=found.user, endpoint=found.endpoint, version=probe.version if probe else None,
            models=tuple(models), busy=busy,
            idle_since=seen.idle_since if busy is False else None,
            can_unload=bool(probe and probe.can_unload and adapter is not None),
            unload_note=(probe.unload_note if probe else "") or (found.api_off or ""),
            reservation=probe.reservation if probe else None,
            error=found.api_off or seen.error, reachable=probe is not None,
            reloads_on_use=adapter is not None and adapter.reloads_on_use,
            owner=_owner(found.uid))

    def _model(self, found: Found, m: ServerModel, probe: Probe | None, seen: _Seen,
               gpu: int | None, sm_busy: bool | None) -> ServerModel:
        key = (found.pid, m.id)
        server_busy = probe.busy if probe is not None else None
        busy = m.busy if m.busy is not None else (
            server_busy if server_busy is not None else sm_busy)
        idle_since = m.idle_since
        if found.kind == "ollama":
            # expires_at minus the server's keep-alive is the last request only when
            # the request sent no keep-alive of its own: never earlier than a change
            # of expires_at seen here (a request ended), nor than this directory's
            # first sight of the model (what it does not know, it does not claim).
            now = self._clock()
            last, first_seen, changed = self._expires.get(key, (m.expires_at, now, None))
            if m.expires_at != last:
                changed = now
            self._expires[key] = (m.expires_at, first_seen, changed)
            if idle_since is not None:
                idle_since = max(idle_since, first_seen, changed or 0.0)
        elif server_busy is not None:
            idle_since = seen.idle_since
        if busy:
            idle_since = None
        state = "on cpu" if key in self._offloaded else m.state
        return dataclasses.replace(m, gpu=m.gpu if m.gpu is not None else gpu, busy=busy,
                                   idle_since=idle_since, state=state)


def _trusted(found: Found) -> bool:
    """A key goes only to a process of ours that is seen listening on the port
    asked: a neighbour's look-alike, or one squatting a server's port, gets none."""
    mine = found.uid is not None and hasattr(os, "getuid") and found.uid == os.getuid()
    return mine and found.port_owned


def _owner(uid: int | None) -> str:
    """"you", "service" (a system account: the ``ollama`` user) or "other"."""
    if uid is None or not hasattr(os, "getuid") or uid == os.getuid():
        return "you"
    return "service" if uid < 1000 else "other"


def _runner_of(found: Found, model: ServerModel) -> int | None:
    """The child given ``model``'s weights file on its command line, if any."""
    if not model.file:
        return None
    want = base(model.file)
    return next((pid for pid, path in found.runners if base(path) == want), None)


__all__ = ["ServerDirectory"]
