"""The agent's listener: one daemon thread ("vram-steward-agent"), one selector.

AF_UNIX stream socket (0600 in a 0700 dir) with a peer-uid check on accept;
TCP on 127.0.0.1 with an HMAC challenge where AF_UNIX is unavailable
(Windows).  Bounded: connections, subscribers, frame size, output buffer,
partial-frame and idle timeouts.  Handlers that may be slow (free_cache, gc)
run on a short-lived worker thread so other clients keep being served.

Fairness
    Every client of the same user looks alike, so a full table must never
    lock the app out: a connection arriving at ``max_connections`` evicts one
    that is there (``Server._eviction_rank`` says which) instead of being
    refused, and the evicted one gets a ``busy`` error frame before it is
    closed.  A client that leaks or hoards connections therefore evicts the
    least recently active ones (its own idle ones first), while the app's
    short connections (connect, one request, close) always get in.
    Subscriptions are capped separately (``max_subscribers``), evicting the
    oldest subscriber.  A same-user client reconnecting in a tight loop can
    still win the race for a slot: that is beyond what a listener can tell
    apart.
"""

from __future__ import annotations

import collections
import errno
import os
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import log as _log
from . import protocol
from .errors import ActionError, BadParams

__all__ = ["ActionError", "BadParams", "Options", "Server", "peer_allowed", "peer_uid"]

THREAD_NAME = "vram-steward-agent"


class Options:
    """Server limits.

    ``max_subscribers``: connections holding a ``subscribe`` at once (the
    oldest is evicted by a new one).  ``grace_period``: seconds a new
    connection that has not sent a whole request yet is evicted only after
    every other non-subscriber, so the app's connection gets to send its
    request.  ``backlog``: the listen backlog (a burst of a few hundred
    connects is queued, not refused: a full AF_UNIX backlog fails a
    client's connect at once), and the most connections accepted per wakeup
    (a burst is taken at once, yet reads keep being served between bursts).
    """

    def __init__(self, partial_timeout: float = 10.0, idle_timeout: float = 300.0,
                 max_connections: int = 16, max_output: int = 4 * 1024 * 1024,
                 tick_interval: float = 1.0, max_subscribers: int = 8,
                 grace_period: float = 1.0, backlog: int = 256) -> None:
        self.partial_timeout = float(partial_timeout)
        self.idle_timeout = float(idle_timeout)
        self.max_connections = int(max_connections)
        self.max_output = int(max_output)
        self.tick_interval = float(tick_interval)
        self.max_subscribers = int(max_subscribers)
        self.grace_period = float(grace_period)
        self.backlog = max(1, int(backlog))


# -- peer credentials ------------------------------------------------------

def peer_allowed(peer: int | None, own_uid: int) -> bool:
    """Only a peer of our own uid may talk to us (unknown peer: refused)."""
    return isinstance(peer, int) and not isinstance(peer, bool) and peer == own_uid


_getpeereid = None
if sys.platform == "darwin" or "bsd" in sys.platform:
    try:
        import ctypes
        import ctypes.util
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _getpeereid = _libc.getpeereid
        _getpeereid.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint32),
                                ctypes.POINTER(ctypes.c_uint32)]
    except Exception:
        _getpeereid = None

PEERCRED_SUPPORTED = hasattr(socket, "SO_PEERCRED") or _getpeereid is not None


def peer_uid(sock: socket.socket) -> int | None:
    """The connected peer's uid (SO_PEERCRED / getpeereid), None if unknown."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", raw)
            return uid
        if _getpeereid is not None:
            import ctypes
            uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
            if _getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) == 0:
                return int(uid.value)
    except Exception:
        return None
    return None


def _own_uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


# -- connections -----------------------------------------------------------

class _Conn:
    """One client connection (agent thread only).

    ``accepted``/``last_request``/``subscribed_at`` (monotonic) order
    evictions; ``on_worker`` marks a request running on the worker thread,
    whose connection is never evicted so its reply is not lost.
    """

    __slots__ = ("sock", "decoder", "out", "last_rx", "partial_since", "authed",
                 "challenge", "events", "closed", "mask", "name", "accepted",
                 "last_request", "subscribed_at", "on_worker")

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.decoder = protocol.FrameDecoder()
        self.out = bytearray()
        self.last_rx = time.monotonic()
        self.partial_since: float | None = None
        self.authed = True
        self.challenge: str | None = None
        self.events: frozenset | None = None  # subscribed events
        self.closed = False
        self.mask = 0
        self.name = name
        self.accepted = self.last_rx
        self.last_request: float | None = None  # last whole frame received
        self.subscribed_at = 0.0
        self.on_worker = False


class Server:
    """``handlers``: method -> (callable(params) -> dict, runs_on_worker)."""

    def __init__(self, transport: str, address: str | None,
                 handlers: dict[str, tuple[Callable[[dict], dict], bool]],
                 hello: dict[str, Any], options: Options | None = None,
                 on_tick: Callable[[], None] | None = None,
                 on_dead: Callable[[], None] | None = None) -> None:
        self.transport = transport
        self.path = address if transport == "unix" else None
        self.address = address or ""
        self.handlers = handlers
        self.hello = dict(hello)
        self.options = options or Options()
        self.on_tick = on_tick
        self.on_dead = on_dead
        self.token = _token_hex() if transport == "tcp" else None
        self.owner_pid = os.getpid()
        self._uid = _own_uid()
        self._listener: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._conns: dict[int, _Conn] = {}
        self._events: collections.deque = collections.deque(maxlen=1000)
        self._completed: collections.deque = collections.deque()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._conn_seq = 0
        self._accepting = False
        self._evictions = 0

    # -- lifecycle ---------------------------------------------------------
    def open(self) -> None:
        if self.transport == "unix":
            path = self.path or ""
            try:
                if os.path.exists(path) or os.path.islink(path):
                    os.unlink(path)  # stale socket of a dead process with our pid
            except OSError:
                pass
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                old = os.umask(0o177)
                try:
                    sock.bind(path)
                finally:
                    os.umask(old)
                os.chmod(path, 0o600)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", 0))
            except BaseException:
                sock.close()
                raise
            self.address = "127.0.0.1:%d" % sock.getsockname()[1]
        sock.listen(self.options.backlog)
        sock.setblocking(False)
        self._listener = sock
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._resume_accepting()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def stop(self, timeout: float = 2.0) -> None:
        self._stopping = True
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def close_fds_after_fork(self) -> None:
        """In a forked child: close the inherited fds (never unlink the socket file)."""
        self._stopping = True
        for c in self._conns.values():
            _close_quietly(c.sock)
        self._close_own_sockets()
        self._conns = {}

    def _close_own_sockets(self) -> None:
        """The listener, the wake pair and the selector (not client connections)."""
        for sock in (self._listener, self._wake_r, self._wake_w, self._sel):
            _close_quietly(sock)

    # -- any thread --------------------------------------------------------
    def _wake(self) -> None:
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"\0")
        except Exception:
            pass  # full (a wake is pending anyway) or closed

    def emit(self, name: str, data: dict[str, Any]) -> None:
        """Queue an event for subscribers; callable from any thread, never raises."""
        try:
            self._events.append((name, data))
            self._wake()
        except Exception:
            pass

    # -- agent thread ------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:
            _log.log_exc("agent loop died")
        finally:
            self._cleanup()
            if not self._stopping and self.on_dead is not None:
                try:
                    self.on_dead()
                except Exception:
                    _log.log_exc("on_dead failed")

    def _cleanup(self) -> None:
        for conn in list(self._conns.values()):
            self._close(conn, None)
        self._close_own_sockets()
        if self.path and os.getpid() == self.owner_pid:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def _loop(self) -> None:
        sel = self._sel
        assert sel is not None
        next_tick = time.monotonic()
        while not self._stopping:
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                ready = sel.select(timeout)
            except InterruptedError:
                ready = []
            for key, mask in ready:
                try:
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        try:
                            while self._wake_r is not None and self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
                    else:
                        conn = key.data
                        if mask & selectors.EVENT_READ and not conn.closed:
                            self._read(conn)
                        if mask & selectors.EVENT_WRITE and not conn.closed:
                            self._flush(conn)
                except Exception:
                    _log.log_exc("connection handling failed")
                    if isinstance(key.data, _Conn):
                        self._close(key.data, "internal error")
            if self._stopping:
                break
            self._deliver()
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + self.options.tick_interval
                self._resume_accepting()
                self._log_evictions()
                self._expire(now)
                if self.on_tick is not None:
                    try:
                        self.on_tick()
                    except Exception:
                        _log.log_exc("tick failed")
                self._deliver()

    def _accept(self) -> None:
        """Accept up to one backlog's worth: a burst is admitted in one wakeup,
        and a client connecting in a loop cannot starve the other sockets."""
        assert self._listener is not None
        for _ in range(self.options.backlog):
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, getattr(errno, "EPROTO", -1)):
                    continue  # the peer gave up while queued
                self._pause_accepting(exc)
                return
            try:
                self._admit(sock)
            except Exception:
                _log.log_exc("admitting a connection failed")
                _close_quietly(sock)

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of fds (or memory): stop watching the listener until the next
        tick, or it stays readable and the loop spins writing log lines."""
        _log.log("accept failed: %r; pausing accepts until the next tick" % (exc,))
        if self._accepting and self._sel is not None and self._listener is not None:
            try:
                self._sel.unregister(self._listener)
            except Exception:
                pass
        self._accepting = False

    def _resume_accepting(self) -> None:
        if self._accepting or self._sel is None or self._listener is None:
            return
        try:
            self._sel.register(self._listener, selectors.EVENT_READ, "listen")
            self._accepting = True
        except Exception:
            _log.log_exc("cannot watch the listener")

    def _admit(self, sock: socket.socket) -> None:
        """Check the peer, make room if the table is full, say hello."""
        assert self._sel is not None
        if self.transport == "unix" and PEERCRED_SUPPORTED:
            uid = peer_uid(sock)
            if not peer_allowed(uid, self._uid):
                _log.log("refused a connection from uid %r (ours is %d)" % (uid, self._uid))
                sock.close()
                return
        if len(self._conns) >= self.options.max_connections and not self._make_room():
            _log.log("refused a connection: %d open, none evictable" % len(self._conns))
            sock.close()
            return
        sock.setblocking(False)
        self._conn_seq += 1
        conn = _Conn(sock, "c%d" % self._conn_seq)
        hello = dict(self.hello)
        if self.transport == "tcp":
            conn.authed = False
            conn.challenge = _token_hex()
            hello["auth"] = {"challenge": conn.challenge}
        else:
            hello["auth"] = None
        conn.mask = selectors.EVENT_READ
        self._sel.register(sock, selectors.EVENT_READ, conn)
        self._conns[sock.fileno()] = conn
        self._send(conn, {"hello": hello})

    # -- fairness ----------------------------------------------------------
    def _eviction_rank(self, conn: _Conn, now: float) -> tuple[int, float]:
        """Lower is evicted first.

        0. Not authenticated yet (TCP), oldest first: any local user can
           connect there, so those must never crowd out the real client.
        1. Not subscribed, least recent whole request first (a connection
           that never sent one counts from its accept): an idle or leaked
           connection goes before a busy one, and bytes of a frame that never
           completes do not count as activity.
        2. Within ``grace_period`` of its accept and no request yet, oldest
           first: the app's fresh connection gets to send its request even
           while other clients keep connecting.
        3. Subscribers, oldest subscription first: a long-lived watcher of
           events goes last.
        """
        if not conn.authed:
            return (0, conn.accepted)
        if conn.events:
            return (3, conn.subscribed_at)
        if conn.last_request is not None:
            return (1, conn.last_request)
        if now - conn.accepted < self.options.grace_period:
            return (2, conn.accepted)
        return (1, conn.accepted)

    def _victim(self) -> _Conn | None:
        """The connection to evict, never one whose request runs on the
        worker (its reply would be lost); None if there is none."""
        now = time.monotonic()
        candidates = [c for c in self._conns.values() if not c.on_worker and not c.closed]
        if not candidates:
            return None
        return min(candidates, key=lambda c: self._eviction_rank(c, now))

    def _make_room(self) -> bool:
        victim = self._victim()
        if victim is None:
            return False
        self._evict(victim, "room for a new connection (%d open)" % len(self._conns))
        return True

    def _evict(self, conn: _Conn, why: str) -> None:
        """Close ``conn`` with a ``busy`` error frame saying why.

        Its unread input is drained first: closing a socket with unread data
        resets the connection, and the peer would lose the frame.
        """
        self._send(conn, protocol.error(None, protocol.BUSY, "connection closed: " + why))
        try:
            conn.sock.recv(65536)
        except Exception:
            pass
        self._evictions += 1
        first = self._evictions == 1
        self._close(conn, "evicted: " + why if first else None, flush=True)

    def _log_evictions(self) -> None:
        """One line per tick for a flood's evictions: a line each would cost
        more than the eviction and slow the agent down exactly when it is
        busiest (the first of a tick is logged in full when it happens)."""
        if self._evictions > 1:
            _log.log("evicted %d more connections to make room" % (self._evictions - 1))
        self._evictions = 0

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, None)
            return
        if not data:
            self._close(conn, None)
            return
        conn.last_rx = time.monotonic()
        try:
            for message in conn.decoder.feed(data):
                self._handle(conn, message)
                if conn.closed:
                    return
        except protocol.ProtocolError as exc:
            self._send(conn, protocol.error(None, protocol.BAD_REQUEST, str(exc)[:200]))
            self._close(conn, "protocol error: %s" % exc, flush=True)
            return
        if conn.decoder.pending:
            if conn.partial_since is None:
                conn.partial_since = conn.last_rx
        else:
            conn.partial_since = None

    def _handle(self, conn: _Conn, message: dict[str, Any]) -> None:
        conn.last_request = time.monotonic()
        raw_id = message.get("id")
        echo_id = raw_id if (isinstance(raw_id, int) and not isinstance(raw_id, bool)
                             or isinstance(raw_id, str) and len(raw_id) <= 64) else None
        try:
            request_id, method, params = protocol.parse_request(message)
        except protocol.ProtocolError as exc:
            if not conn.authed:
                self._close(conn, "unauthenticated bad request")
                return
            self._send(conn, protocol.error(echo_id, protocol.BAD_REQUEST, str(exc)))
            return
        if not conn.authed:
            ok = False
            if method == "auth":
                mac = params.get("hmac")
                if isinstance(mac, str) and conn.challenge and self.token:
                    try:
                        expected = protocol.auth_hmac(self.token, conn.challenge)
                        ok = _compare_digest(expected, mac)
                    except Exception:
                        ok = False
            if not ok:
                self._send(conn, protocol.error(request_id, protocol.UNAUTHORIZED,
                                                "authentication failed"))
                self._close(conn, "authentication failed", flush=True)
                return
            conn.authed = True
            self._send(conn, protocol.result(request_id, {"authenticated": True}))
            return
        if method not in protocol.METHODS:
            self._send(conn, protocol.error(request_id, protocol.UNKNOWN_METHOD,
                                            "unknown method %r" % method[:64]))
            return
        try:
            if method == "auth":
                value = {"authenticated": True}
            elif method == "hello":
                value = dict(self.hello, auth=None)
            elif method == "ping":
                value = {"pong": True}
            elif method == "subscribe":
                value = self._subscribe(conn, params)
            else:
                handler = self.handlers.get(method)
                if handler is None:
                    self._send(conn, protocol.error(request_id, protocol.UNKNOWN_METHOD,
                                                    "method %r not available" % method))
                    return
                fn, on_worker = handler
                if on_worker:
                    self._run_on_worker(conn, request_id, fn, params)
                    return
                value = fn(params)
        except BadParams as exc:
            self._send(conn, protocol.error(request_id, protocol.BAD_PARAMS, str(exc)))
            return
        except ActionError as exc:
            self._send(conn, protocol.error(request_id, exc.code, str(exc)[:2000]))
            return
        except Exception as exc:
            _log.log_exc("handler %s failed" % method)
            self._send(conn, protocol.error(request_id, protocol.INTERNAL, repr(exc)[:500]))
            return
        self._send(conn, protocol.result(request_id, value))

    def _subscribe(self, conn: _Conn, params: dict[str, Any]) -> dict[str, Any]:
        events = params.get("events")
        if events is None:
            wanted = set(protocol.EVENTS)
        elif isinstance(events, list) and all(isinstance(e, str) for e in events):
            wanted = set(events) & protocol.EVENTS
        else:
            raise BadParams("events must be a list of strings")
        if wanted and not conn.events:
            self._make_room_for_subscriber(conn)
            conn.subscribed_at = time.monotonic()
        conn.events = frozenset(wanted)
        return {"events": sorted(wanted)}

    def _make_room_for_subscriber(self, conn: _Conn) -> None:
        """At ``max_subscribers``, evict the oldest subscriber: subscribers
        never time out, so a cap is what keeps them from filling the table
        (and the newest subscriber is the one most likely to be listening)."""
        while True:
            subscribers = [c for c in self._conns.values() if c.events and c is not conn]
            if len(subscribers) < self.options.max_subscribers:
                return
            evictable = [c for c in subscribers if not c.on_worker]
            if not evictable:
                raise ActionError(protocol.BUSY, "too many subscribers")
            oldest = min(evictable, key=lambda c: c.subscribed_at)
            self._evict(oldest, "room for a new subscriber (%d subscribed)" % len(subscribers))

    def _run_on_worker(self, conn: _Conn, request_id: Any, fn: Callable, params: dict) -> None:
        if self._busy:
            self._send(conn, protocol.error(request_id, protocol.BUSY,
                                            "another action is running"))
            return
        self._busy = True
        conn.on_worker = True

        def work() -> None:
            try:
                outcome = protocol.result(request_id, fn(params))
            except BadParams as exc:
                outcome = protocol.error(request_id, protocol.BAD_PARAMS, str(exc))
            except ActionError as exc:
                outcome = protocol.error(request_id, exc.code, str(exc)[:2000])
            except BaseException as exc:
                _log.log_exc("action failed")
                outcome = protocol.error(request_id, protocol.FAILED, repr(exc)[:500])
            self._completed.append((conn, outcome))
            self._busy = False
            self._wake()

        try:
            threading.Thread(target=work, name=THREAD_NAME + "-action", daemon=True).start()
        except Exception as exc:
            self._busy = False
            conn.on_worker = False
            self._send(conn, protocol.error(request_id, protocol.INTERNAL, repr(exc)))

    def _deliver(self) -> None:
        while self._completed:
            conn, outcome = self._completed.popleft()
            conn.on_worker = False
            if not conn.closed:
                self._send(conn, outcome)
        while self._events:
            name, data = self._events.popleft()
            for conn in list(self._conns.values()):
                if conn.events and name in conn.events and not conn.closed:
                    self._send(conn, protocol.event(name, data))

    def _send(self, conn: _Conn, message: dict[str, Any]) -> None:
        if conn.closed:
            return
        try:
            frame = protocol.encode(message)
        except (protocol.ProtocolError, ValueError, TypeError) as exc:
            frame = protocol.encode(protocol.error(message.get("id"), protocol.INTERNAL,
                                                   "reply not encodable: %s" % str(exc)[:200]))
        conn.out += frame
        if len(conn.out) > self.options.max_output:
            self._close(conn, "output buffer over %d bytes" % self.options.max_output)
            return
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        while conn.out:
            try:
                n = conn.sock.send(conn.out[:262144])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._close(conn, None)
                return
            if n <= 0:
                break
            del conn.out[:n]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if want != conn.mask and self._sel is not None:
            conn.mask = want
            self._sel.modify(conn.sock, want, conn)

    def _expire(self, now: float) -> None:
        opts = self.options
        for conn in list(self._conns.values()):
            if conn.partial_since is not None and now - conn.partial_since > opts.partial_timeout:
                self._close(conn, "partial frame older than %.1f s" % opts.partial_timeout)
            elif not conn.events and now - conn.last_rx > opts.idle_timeout:
                self._close(conn, "idle for %.0f s" % opts.idle_timeout)

    def _close(self, conn: _Conn, reason: str | None, flush: bool = False) -> None:
        if conn.closed:
            return
        if flush and conn.out:
            try:
                conn.sock.send(conn.out)
            except Exception:
                pass
        conn.closed = True
        if reason:
            _log.log("closing connection %s: %s" % (conn.name, reason))
        try:
            fd = conn.sock.fileno()
            self._conns.pop(fd, None)
            if self._sel is not None and fd >= 0:
                self._sel.unregister(conn.sock)
        except Exception:
            pass
        try:
            conn.sock.close()
        except Exception:
            pass


def _token_hex() -> str:
    import secrets  # TCP transport only (Windows): not imported on the Unix path

    return secrets.token_hex(32)


def _compare_digest(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a, b)


def _close_quietly(closable: Any) -> None:
    try:
        if closable is not None:
            closable.close()
    except Exception:
        pass
