"""The app's side of the agent channel: the registry and one connection.

Qt-free and blocking, but every socket operation runs under a deadline: a hung
or malicious agent can delay a caller by at most the timeout it passed, and
can never make it decode anything but bounded JSON (``app.agent.protocol``).

Registry
    Each agent writes ``<runtime>/agents/<pid>.json`` (see ``AgentEntry``).
    ``read_registry`` returns the live ones and deletes stale ones: the pid is
    gone (or a zombie), or the pid now belongs to another process (its start
    time differs by more than ``CREATE_TIME_TOLERANCE_S``).  Only files owned
    by the current user are ever deleted, and a socket only when it lies in
    the registry's runtime directory.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import logging
import os
import socket
import tempfile
import time
from typing import Any

from app.agent import protocol
from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
    ModelInfo,
)

log = logging.getLogger(__name__)

CREATE_TIME_TOLERANCE_S = 1.0
REGISTRY_SUBDIR = "agents"
MAX_REGISTRY_FILE_BYTES = 64 * 1024
#: Consecutive timed-out calls after which a connection is dropped (the agent
#: is hung; requests would only pile up in its socket buffer).
MAX_PENDING_TIMEOUTS = 4
#: Pause before connecting again to an agent whose listen backlog is full.
CONNECT_RETRY_S = 0.01


def runtime_dir() -> str:
    """The per-user directory agents register in (same rule as the agent's)."""
    env = os.environ.get("VRAM_STEWARD_RUNTIME_DIR")
    if env:
        return os.path.abspath(env)
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or tempfile.gettempdir()
        return os.path.join(base, "vram-steward")
    return os.path.join(tempfile.gettempdir(), f"vram-steward-{os.getuid()}")


def registry_dir(runtime: str | None = None) -> str:
    return os.path.join(runtime or runtime_dir(), REGISTRY_SUBDIR)


# ----------------------------------------------------------------- registry


def _owned_by_us(path: str) -> bool:
    if not hasattr(os, "getuid"):
        return True  # Windows: the runtime directory is per-user (%LOCALAPPDATA%)
    try:
        return os.lstat(path).st_uid == os.getuid()
    except OSError:
        return False


def _process_state(pid: int) -> tuple[bool, float | None]:
    """(alive, create_time or None when unknown)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False, None
        return True, proc.create_time()
    except psutil.NoSuchProcess:
        return False, None
    except (psutil.AccessDenied, OSError):
        return True, None  # exists, cannot check more: keep it


def is_stale(entry: AgentEntry) -> bool:
    """True when the entry's process is gone, or its pid was reused."""
    alive, created = _process_state(entry.pid)
    if not alive:
        return True
    if created is not None and entry.create_time is not None:
        return abs(created - entry.create_time) > CREATE_TIME_TOLERANCE_S
    return False


def load_entry(path: str) -> AgentEntry | None:
    """One registry file, or None when unreadable/malformed (never raises)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_REGISTRY_FILE_BYTES + 1)
        if len(raw) > MAX_REGISTRY_FILE_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return AgentEntry.from_json(data, path=path)


def remove_entry(entry: AgentEntry, runtime: str | None = None) -> bool:
    """Delete a stale entry's file (and its socket when it lies in our runtime
    dir); only what the current user owns.  True if the file was removed."""
    runtime = runtime or runtime_dir()
    if not entry.path or not _owned_by_us(entry.path):
        return False
    try:
        os.unlink(entry.path)
    except OSError:
        return False
    if entry.transport == "unix":
        sock = os.path.realpath(entry.address)
        root = os.path.realpath(runtime)
        if (os.path.commonpath([sock, root]) == root and _owned_by_us(sock)
                and not os.path.isdir(sock)):
            try:
                os.unlink(sock)
            except OSError:
                pass
    return True


def read_registry(dir: str | None = None, prune: bool = True) -> list[AgentEntry]:
    """Live agents registered under runtime dir ``dir`` (default ``runtime_dir()``),
    sorted by pid.  Malformed or unreadable files are skipped (left alone: the
    agent may be writing one); stale ones are deleted when ``prune``."""
    runtime = dir or runtime_dir()
    folder = registry_dir(runtime)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    entries = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        entry = load_entry(os.path.join(folder, name))
        if entry is None:
            continue
        if is_stale(entry):
            if prune:
                remove_entry(entry, runtime)
            continue
        entries.append(entry)
    entries.sort(key=lambda e: e.pid)
    return entries


# --------------------------------------------------------------- connection


class AgentUnavailable(Exception):
    """The agent could not be reached: connect failed, timed out, closed, garbled."""


class AgentTimeout(AgentUnavailable):
    """The agent did not answer in time (the connection stays usable)."""


class AgentIncompatible(AgentUnavailable):
    """The agent speaks a newer protocol than this app understands."""


class AgentError(Exception):
    """The agent answered with an error reply."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _protocol_major(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.split(".", 1)[0])
        except ValueError:
            return None
    return None


class AgentConnection:
    """One connection to one agent: hello, auth, then ``call``s.

    Not thread-safe: one thread uses a connection at a time.  Every method
    raises ``AgentUnavailable`` (connection problems, timeouts) or
    ``AgentError`` (the agent's error reply), nothing else.
    """

    def __init__(self, entry: AgentEntry, timeout_s: float = 2.0) -> None:
        self.entry = entry
        self.timeout_s = timeout_s
        self.hello: dict[str, Any] = {}
        self._sock: socket.socket | None = None
        self._decoder = protocol.FrameDecoder()
        self._inbox: collections.deque[dict[str, Any]] = collections.deque()
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=256)
        self._next_id = 0
        self._timeouts = 0
        try:
            self._connect(time.monotonic() + timeout_s)
        except AgentError as exc:  # e.g. auth refused
            self.close()
            raise AgentUnavailable(f"agent {entry.pid}: handshake refused: {exc}") from None
        except BaseException:
            self.close()
            raise

    # -- public
    @property
    def closed(self) -> bool:
        return self._sock is None

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        self._next_id += 1
        request_id = self._next_id
        self._send(protocol.request(request_id, method, params), deadline)
        try:
            reply = self._read_reply(request_id, deadline)
        except AgentTimeout:
            self._timeouts += 1
            if self._timeouts >= MAX_PENDING_TIMEOUTS:
                self.close()
            raise
        self._timeouts = 0
        return reply

    def events(self) -> list[dict[str, Any]]:
        """Unsolicited events received so far (taken: each is returned once)."""
        out = list(self._events)
        self._events.clear()
        return out

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> AgentConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals
    def _fail(self, why: str, cause: BaseException | None = None) -> AgentUnavailable:
        self.close()
        err = AgentUnavailable(f"agent {self.entry.pid}: {why}")
        err.__cause__ = cause
        return err

    def _connect(self, deadline: float) -> None:
        entry = self.entry
        try:
            if entry.transport == "unix":
                if not hasattr(socket, "AF_UNIX"):
                    raise AgentUnavailable("unix sockets are not available here")
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target: Any = entry.address
            elif entry.transport == "tcp":
                host, _, port = entry.address.rpartition(":")
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                target = (host.strip("[]") or "127.0.0.1", int(port))
            else:
                raise AgentUnavailable(f"unknown transport {entry.transport!r}")
        except (ValueError, OSError) as exc:
            raise AgentUnavailable(f"agent {entry.pid}: bad address {entry.address!r}: {exc}") from None
        self._sock = sock
        while True:
            try:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                sock.connect(target)
                break
            except BlockingIOError as exc:
                # A full AF_UNIX backlog fails at once (another client's burst):
                # the agent drains it within milliseconds, so try again.
                if time.monotonic() + CONNECT_RETRY_S >= deadline:
                    raise self._fail(f"cannot connect to {entry.address}: {exc}", exc) from None
                sock.close()
                time.sleep(CONNECT_RETRY_S)
                sock = self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            except (OSError, TimeoutError) as exc:
                raise self._fail(f"cannot connect to {entry.address}: {exc}", exc) from None
        first = self._recv_message(deadline)
        hello = first.get("hello")
        if not isinstance(hello, dict):
            raise self._fail("no hello from the agent")
        self.hello = hello
        major = _protocol_major(hello.get("protocol"))
        if major is None:
            raise self._fail(f"hello without a protocol version: {hello.get('protocol')!r}")
        if major > protocol.PROTOCOL_VERSION:
            self.close()
            raise AgentIncompatible(
                f"agent {entry.pid} speaks protocol {hello.get('protocol')}, this app "
                f"understands up to {protocol.PROTOCOL_VERSION}: update VRAM Steward")
        auth = hello.get("auth")
        if isinstance(auth, dict) and auth.get("challenge") is not None:
            challenge = auth.get("challenge")
            if not entry.token:
                raise self._fail("the agent asks for authentication but its entry has no token")
            try:
                mac = hmac.new(entry.token.encode("utf-8"), bytes.fromhex(str(challenge)),
                               hashlib.sha256).hexdigest()
            except ValueError:
                raise self._fail("malformed auth challenge") from None
            self._next_id += 1
            self._send(protocol.request(self._next_id, "auth", {"hmac": mac}), deadline)
            self._read_reply(self._next_id, deadline)

    def _send(self, message: dict[str, Any], deadline: float) -> None:
        if self._sock is None:
            raise AgentUnavailable(f"agent {self.entry.pid}: connection closed")
        try:
            data = protocol.encode(message)
        except (protocol.ProtocolError, TypeError, ValueError) as exc:
            raise AgentUnavailable(f"cannot encode request: {exc}") from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._fail("timed out")
        try:
            self._sock.settimeout(remaining)
            self._sock.sendall(data)  # a partial send corrupts the stream: close
        except (OSError, TimeoutError) as exc:
            raise self._fail(f"send failed: {exc or 'timed out'}", exc) from None

    def _recv_message(self, deadline: float) -> dict[str, Any]:
        while not self._inbox:
            if self._sock is None:
                raise AgentUnavailable(f"agent {self.entry.pid}: connection closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentTimeout(f"agent {self.entry.pid}: timed out")
            try:
                self._sock.settimeout(remaining)
                data = self._sock.recv(65536)
            except TimeoutError:
                raise AgentTimeout(f"agent {self.entry.pid}: timed out") from None
            except OSError as exc:
                raise self._fail(f"receive failed: {exc}", exc) from None
            if not data:
                raise self._fail("connection closed by the agent")
            try:
                self._inbox.extend(self._decoder.feed(data))
            except protocol.ProtocolError as exc:
                raise self._fail(f"malformed data: {exc}", exc) from None
        return self._inbox.popleft()

    def _read_reply(self, request_id: int, deadline: float) -> dict[str, Any]:
        while True:
            message = self._recv_message(deadline)
            if "event" in message and "id" not in message:
                self._events.append(message)
                continue
            if message.get("id") != request_id:
                continue  # a late reply to a request that timed out earlier
            if "error" in message:
                err = message.get("error")
                if not isinstance(err, dict):
                    raise self._fail("malformed error reply")
                raise AgentError(str(err.get("code") or protocol.INTERNAL),
                                 str(err.get("message") or ""))
            value = message.get("result")
            if not isinstance(value, dict):
                raise self._fail("malformed reply: result is not an object")
            return value


# ------------------------------------------------------------- one-shot calls


def report_to_json(report: AgentReport | None, entry: AgentEntry | None = None,
                   error: str | None = None) -> dict[str, Any]:
    """The ``agents --json`` record (bytes; None = unknown)."""
    if report is None:
        return {"pid": entry.pid if entry else None,
                "argv": list(entry.argv) if entry else [],
                "python": entry.python if entry else None,
                "torch": entry.torch if entry else None, "torch_status": None,
                "cuda_initialized": None, "allocator_backend": None, "devices": [],
                "models": [], "idle_unload_s": None, "events": [],
                "error": error or "no report"}
    return {
        "pid": report.pid, "argv": list(report.argv), "python": report.python,
        "torch": report.torch, "torch_status": report.torch_status,
        "cuda_initialized": report.cuda_initialized,
        "allocator_backend": report.allocator_backend,
        "devices": [{"index": d.index, "allocated": d.allocated, "reserved": d.reserved,
                     "peak_allocated": d.peak_allocated, "peak_reserved": d.peak_reserved,
                     "inactive_split": d.inactive_split,
                     "num_alloc_retries": d.num_alloc_retries, "num_ooms": d.num_ooms}
                    for d in report.devices],
        "models": [model_to_json(m, report.received_at) for m in report.models],
        "idle_unload_s": report.idle_unload_s,
        "events": [event_to_json(e) for e in report.events],
        "error": error,
    }


def model_to_json(m: ModelInfo, seen_at: float) -> dict[str, Any]:
    """A model entry as the protocol spells it, plus ``idle_s``: seconds on the
    agent's idle clock at ``seen_at`` (epoch seconds; None = unknown)."""
    idle = m.idle_s(seen_at) if seen_at else None
    return {"id": m.id, "name": m.name, "class": m.class_name, "params": m.params,
            "param_bytes": m.param_bytes, "buffer_bytes": m.buffer_bytes,
            "placeholder_bytes": m.placeholder_bytes, "device": m.device, "dtype": m.dtype,
            "training": m.training, "requires_grad": m.requires_grad,
            "training_evidence": m.training_evidence, "last_used": m.last_used,
            "first_seen": m.first_seen, "idle_since": m.idle_since,
            "idle_s": None if idle is None else round(idle, 1), "group": m.group,
            "state": m.state, "offloaded_to": m.offloaded_to, "pinned": m.pinned,
            "home_device": m.home_device, "unload_blocker": m.unload_blocker,
            "auto_unload_blocker": m.auto_unload_blocker}


def event_to_json(event: ModelEvent) -> dict[str, Any]:
    """A model event as the protocol spells it."""
    return {"seq": event.seq, "time": event.time, "model": event.model, "name": event.name,
            "action": event.action, "state": event.state, "target": event.target,
            "bytes_moved": event.bytes_moved, "bytes_released": event.bytes_released,
            "seconds": event.seconds, "reason": event.reason, "ok": event.ok,
            "error": event.error}


def query_report(entry: AgentEntry, timeout_s: float = 2.0, models: bool = True) -> AgentReport:
    deadline = time.monotonic() + timeout_s
    with AgentConnection(entry, timeout_s) as conn:
        started = time.perf_counter()
        data = conn.call("report", {"models": models}, max(0.001, deadline - time.monotonic()))
        rtt = time.perf_counter() - started
    report = AgentReport.from_json(data, received_at=time.time(), round_trip_s=rtt)
    if report is None:
        raise AgentUnavailable(f"agent {entry.pid}: malformed report")
    return report


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def free_cache_result(pid: int, data: dict[str, Any]) -> FreeCacheResult:
    before = _opt_int(data.get("reserved_before"))
    after = _opt_int(data.get("reserved_after"))
    freed = _opt_int(data.get("freed"))
    if freed is None and before is not None and after is not None:
        freed = max(0, before - after)
    return FreeCacheResult(pid=pid, ok=True, reserved_before=before, reserved_after=after,
                           freed=freed)


def free_cache(entry: AgentEntry, timeout_s: float = 30.0) -> FreeCacheResult:
    """gc.collect() + empty_cache() in the agent's process; never raises."""
    deadline = time.monotonic() + timeout_s
    try:
        with AgentConnection(entry, min(timeout_s, 5.0)) as conn:
            data = conn.call("free_cache", {}, max(0.001, deadline - time.monotonic()))
    except (AgentUnavailable, AgentError) as exc:
        return FreeCacheResult(pid=entry.pid, ok=False, error=str(exc))
    return free_cache_result(entry.pid, data)


def collect_garbage(entry: AgentEntry, timeout_s: float = 30.0) -> dict[str, Any]:
    """gc.collect() in the agent's process: ``{"ok", "collected", "seconds", "error"}``."""
    deadline = time.monotonic() + timeout_s
    try:
        with AgentConnection(entry, min(timeout_s, 5.0)) as conn:
            data = conn.call("gc", {}, max(0.001, deadline - time.monotonic()))
    except (AgentUnavailable, AgentError) as exc:
        return {"ok": False, "collected": None, "seconds": None, "error": str(exc)}
    return {"ok": True, "collected": _opt_int(data.get("collected")),
            "seconds": data.get("seconds") if isinstance(data.get("seconds"), (int, float))
            and not isinstance(data.get("seconds"), bool) else None, "error": None}


# ------------------------------------------------------------ model manager

#: Unload and reload move whole models (a 2 GB fp16 UNet takes ~0.2 s to pinned
#: host memory, ~1 s to disk, more on a slow disk): generous by default.
MODEL_ACTION_TIMEOUT_S = 300.0
UNAVAILABLE = "unavailable"  # not a protocol code: the agent could not be reached
TIMEOUT = "timeout"  # not a protocol code: no answer in time (the action may still finish)


def _call_once(entry: AgentEntry, method: str, params: dict[str, Any],
               timeout_s: float) -> dict[str, Any]:
    """One request on a connection of its own (never a poller's): raises
    AgentUnavailable / AgentTimeout / AgentError."""
    deadline = time.monotonic() + timeout_s
    with AgentConnection(entry, min(timeout_s, 5.0)) as conn:
        return conn.call(method, params, max(0.001, deadline - time.monotonic()))


def _action_error(pid: int, model: str, exc: Exception, timeout_s: float) -> ModelActionResult:
    if isinstance(exc, AgentError):
        return ModelActionResult(pid, model, False, error=exc.message or exc.code, code=exc.code)
    if isinstance(exc, AgentTimeout):
        return ModelActionResult(
            pid, model, False, code=TIMEOUT,
            error=f"no answer within {timeout_s:g} s (the agent may still finish it)")
    return ModelActionResult(pid, model, False, error=str(exc), code=UNAVAILABLE)


def model_event_result(pid: int, model: str, data: dict[str, Any]) -> ModelActionResult:
    """An unload/reload reply (the model event) as a ModelActionResult."""
    event = ModelEvent.from_json(data)
    if event is None:
        return ModelActionResult(pid, model, data.get("ok") is not False,
                                 error=_str_or_none(data.get("error")),
                                 code=None if data.get("ok") is not False else protocol.FAILED)
    if not event.ok:
        return ModelActionResult(pid, model, False, event=event,
                                 error=event.error or f"{event.action} failed",
                                 code=protocol.FAILED)
    return ModelActionResult(pid, model, True, event=event)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def unload(entry: AgentEntry, model: str, to: str | None = "cpu", force: bool = False,
           reason: str = "manual", timeout_s: float = MODEL_ACTION_TIMEOUT_S
           ) -> ModelActionResult:
    """Offload model ``model``'s weights (``to`` "cpu" or "disk"; None lets the
    agent choose: cpu for a GPU model, disk for a CPU one); never raises.

    A refusal (training evidence, a forward running, torch.compile, ...) comes
    back as ``ok=False, code="refused"`` with the agent's reason in ``error``.
    """
    params: dict[str, Any] = {"model": model, "force": bool(force)}
    if to is not None:
        params["to"] = to
    if reason != "manual":
        params["reason"] = reason
    try:
        try:
            data = _call_once(entry, "unload", params, timeout_s)
        except AgentError as exc:
            # An agent that validates params strictly may not know "reason": ask again.
            if exc.code != protocol.BAD_PARAMS or "reason" not in params \
                    or "reason" not in exc.message:
                raise
            params.pop("reason")
            data = _call_once(entry, "unload", params, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        return _action_error(entry.pid, model, exc, timeout_s)
    return model_event_result(entry.pid, model, data)


def reload(entry: AgentEntry, model: str, timeout_s: float = MODEL_ACTION_TIMEOUT_S
           ) -> ModelActionResult:
    """Bring an offloaded model back to its home device; never raises."""
    try:
        data = _call_once(entry, "reload", {"model": model}, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        return _action_error(entry.pid, model, exc, timeout_s)
    return model_event_result(entry.pid, model, data)


def pin(entry: AgentEntry, model: str, pinned: bool = True, timeout_s: float = 10.0
        ) -> ModelActionResult:
    """Exempt a model from automatic unloading (or not); never raises."""
    try:
        data = _call_once(entry, "pin", {"model": model, "pinned": bool(pinned)}, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        return _action_error(entry.pid, model, exc, timeout_s)
    value = data.get("pinned")
    return ModelActionResult(entry.pid, model, True,
                             pinned=value if isinstance(value, bool) else bool(pinned))


def set_idle_unload(entry: AgentEntry, seconds: float | None, timeout_s: float = 10.0
                    ) -> dict[str, Any]:
    """The agent's own idle TTL (None = off): ``{"ok", "idle_unload_s", "error", "code"}``."""
    try:
        data = _call_once(entry, "set_policy", {"idle_unload_s": seconds}, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        code = exc.code if isinstance(exc, AgentError) else (
            TIMEOUT if isinstance(exc, AgentTimeout) else UNAVAILABLE)
        message = exc.message if isinstance(exc, AgentError) else str(exc)
        return {"ok": False, "idle_unload_s": None, "error": message, "code": code}
    value = data.get("idle_unload_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        value = None
    return {"ok": True, "idle_unload_s": value, "error": None, "code": None}
