"""One connection to one agent: connect, peer check, hello, auth, then calls.

Blocking, but every socket operation runs under a deadline: a hung or
malicious agent can delay a caller by at most the timeout it passed, and can
never make it decode anything but bounded JSON (``app.agent.protocol``).
Over AF_UNIX, before anything is read or sent, the kernel's word on the
socket's owner (``SO_PEERCRED``) must be: our uid, and the pid the registry
entry names; anyone else's socket is refused unspoken to.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from app.agent import protocol
from app.agent.server.peers import peer_credentials
from app.core.agents.types import AgentEntry

#: Consecutive timed-out calls after which a connection is dropped (the agent
#: is hung; requests would only pile up in its socket buffer).
MAX_PENDING_TIMEOUTS = 4
#: Pause before connecting again to an agent whose listen backlog is full.
CONNECT_RETRY_S = 0.01


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
             timeout_s: float | None = None,
             on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """The reply's result; ``on_event`` is given each event that comes while
        waiting (``record_started``), else they are kept for :meth:`events`."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        self._next_id += 1
        request_id = self._next_id
        self._send(protocol.request(request_id, method, params), deadline)
        try:
            reply = self._read_reply(request_id, deadline, on_event)
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
            raise AgentUnavailable(
                f"agent {entry.pid}: bad address {entry.address!r}: {exc}") from None
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
        if entry.transport == "unix":
            self._check_peer(sock)
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

    def _check_peer(self, sock: socket.socket) -> None:
        """The socket's server must be us (uid) and the entry's process (pid)."""
        entry = self.entry
        pid, uid = peer_credentials(sock)
        own = os.getuid() if hasattr(os, "getuid") else None
        # Root reads every user's agents: each must be served by its entry's owner.
        expected = entry.uid if entry.uid is not None and own == 0 else own
        if uid is None:
            raise self._fail(f"cannot tell who serves {entry.address}: refused")
        if uid != expected:
            whose = "you" if expected == own else f"uid {expected}, the entry's owner"
            raise self._fail(f"{entry.address} is served by uid {uid}, not {whose}: refused")
        if pid is not None and pid != entry.pid:
            raise self._fail(f"{entry.address} is served by process {pid}, not {entry.pid}: "
                             "refused")

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

    def _read_reply(self, request_id: int, deadline: float,
                    on_event: Callable[[dict[str, Any]], None] | None = None
                    ) -> dict[str, Any]:
        while True:
            message = self._recv_message(deadline)
            if "event" in message and "id" not in message:
                if on_event is not None:
                    on_event(message)
                else:
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
