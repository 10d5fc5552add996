"""The ``Server``: one daemon thread ("vram-steward-agent"), one selector;
sockets, the loop, frames in and out, timeouts."""

from __future__ import annotations

import collections
import errno
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import log as _log
from .. import protocol
from .connection import Conn, close_quietly
from .dispatch import THREAD_NAME, Dispatch, token_hex
from .fairness import Fairness
from .options import Options
from .pacing import REFUSAL_DELAY_S, Later, Pacer, held_back
from .peers import PEERCRED_SUPPORTED, own_uid, peer_allowed, peer_credentials


class Server(Dispatch, Fairness):
    """``handlers``: method -> (callable(params) -> dict, worker lane: False
    for the loop, True for the action worker, or a lane's name)."""

    def __init__(self, transport: str, address: str | None,
                 handlers: dict[str, tuple[Callable[[dict], dict], bool | str]],
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
        self.token = token_hex() if transport == "tcp" else None
        self.owner_pid = os.getpid()
        self._uid = own_uid()
        self._listener: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._conns: dict[int, Conn] = {}
        self._events: collections.deque = collections.deque(maxlen=1000)
        self._completed: collections.deque = collections.deque()
        self._busy: set[str] = set()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._conn_seq = 0
        self._accepting = False
        self._evictions = 0
        self._later = Later()
        self._pacer = Pacer(self.options.pace_burst, self.options.pace_interval)

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
            close_quietly(c.sock)
        self._close_own_sockets()
        self._conns = {}

    def _close_own_sockets(self) -> None:
        """The listener, the wake pair and the selector (not client connections)."""
        for sock in (self._listener, self._wake_r, self._wake_w, self._sel):
            close_quietly(sock)

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
            due = self._later.next_due()
            timeout = max(0.0, min(next_tick, due if due is not None else next_tick)
                          - time.monotonic())
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
                    if isinstance(key.data, Conn):
                        self._close(key.data, "internal error")
            if self._stopping:
                break
            self._deliver()
            self._run_later()
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
                close_quietly(sock)

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
        pid = None
        if self.transport == "unix" and PEERCRED_SUPPORTED:
            pid, uid = peer_credentials(sock)
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
        conn = Conn(sock, "c%d" % self._conn_seq)
        if pid:
            conn.peer = pid  # one client process's connections are paced together
        hello = dict(self.hello)
        if self.transport == "tcp":
            conn.authed = False
            conn.challenge = token_hex()
            hello["auth"] = {"challenge": conn.challenge}
        else:
            hello["auth"] = None
        conn.mask = selectors.EVENT_READ
        self._sel.register(sock, selectors.EVENT_READ, conn)
        self._conns[sock.fileno()] = conn
        self._send(conn, {"hello": hello})

    def _read(self, conn: Conn) -> None:
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

    def _deliver(self) -> None:
        while self._completed:
            conn, outcome = self._completed.popleft()
            if "event" in outcome:  # a herald of a reply still being worked on
                if not conn.closed:
                    self._send(conn, outcome)
                continue
            if held_back(outcome) and not conn.closed:
                # still unevictable until its (late) reply is sent
                self._later.add(time.monotonic() + REFUSAL_DELAY_S, "reply", conn, outcome)
                continue
            conn.on_worker = False
            if not conn.closed:
                self._send(conn, outcome)
        while self._events:
            name, data = self._events.popleft()
            for conn in list(self._conns.values()):
                if conn.events and name in conn.events and not conn.closed:
                    self._send(conn, protocol.event(name, data))

    def _run_later(self) -> None:
        """Requests whose turn came, refusals whose delay is over (``pacing``)."""
        for action, conn, payload in self._later.pop_due(time.monotonic()):
            if action == "reply":  # a worker's answer, held back
                conn.on_worker = False
                self._send(conn, payload)
            elif action == "send":  # a refusal no worker ran: on_worker is not ours
                self._send(conn, payload)
            elif not conn.closed:
                try:
                    self._handle(conn, payload, paced=True)
                except Exception:
                    _log.log_exc("a paced request failed")
                    self._close(conn, "internal error")

    def _send(self, conn: Conn, message: dict[str, Any]) -> None:
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

    def _flush(self, conn: Conn) -> None:
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
            elif not conn.events and not conn.on_worker and now - conn.last_rx > opts.idle_timeout:
                self._close(conn, "idle for %.0f s" % opts.idle_timeout)

    def _close(self, conn: Conn, reason: str | None, flush: bool = False) -> None:
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
