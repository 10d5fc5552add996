"""Requests: authentication (TCP), the built-in methods, the handlers, and
the worker threads slow handlers run on.

A handler runs on the loop (``False``), or on a worker thread of a lane:
``True`` is the ``"action"`` lane (free_cache, gc, unload, reload: one at a
time), a string names a lane of its own (``"record"``: minutes long, so it
never holds up an unload).  A second request for a busy lane gets ``busy``.
A handler on a worker may send its connection an event ahead of its reply
(:func:`herald`: ``record_started``, once the recording is on)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .. import log as _log
from .. import protocol
from ..errors import ActionError, BadParams
from . import pacing
from .connection import Conn

THREAD_NAME = "vram-steward-agent"

#: The running worker's way to its requesting connection (a thread per request).
_worker = threading.local()


def herald(name: str, data: dict[str, Any]) -> None:
    """On a worker: the event ``name`` to the connection whose request it runs,
    ahead of the reply; called anywhere else (a handler called directly), nothing."""
    post = getattr(_worker, "post", None)
    if post is not None:
        try:
            post(name, data)
        except Exception:  # a courtesy: never the reason a request fails
            _log.log_exc("sending %s failed" % name)


class Dispatch:
    """The ``Server``'s request handling (a mixin: the server sends, closes,
    wakes its loop and makes room for subscribers)."""

    handlers: dict[str, tuple[Callable[[dict], dict], bool | str]]
    hello: dict[str, Any]
    token: str | None
    _completed: Any
    _busy: set[str]  # lanes with a request running
    _later: pacing.Later
    _pacer: pacing.Pacer

    # the server's, declared here (no value: nothing shadows the server's methods)
    _send: Callable[[Conn, dict[str, Any]], None]
    _close: Callable[..., None]
    _wake: Callable[[], None]
    _make_room_for_subscriber: Callable[[Conn], None]

    def _handle(self, conn: Conn, message: dict[str, Any], paced: bool = False) -> None:
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
        if not paced and method not in pacing.UNPACED and self._wait_turn(conn, message):
            return
        value: dict[str, Any]
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
                fn, lane = handler
                if lane:
                    self._run_on_worker(conn, request_id, fn, params,
                                        lane if isinstance(lane, str) else "action")
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

    def _wait_turn(self, conn: Conn, message: dict[str, Any]) -> bool:
        """True when the request waits for its turn (``pacing``): it runs later."""
        now = time.monotonic()
        start = self._pacer.slot(conn.peer, now)
        if start <= now:
            return False
        if self._later.waiting(conn) >= pacing.MAX_WAITING:
            self._close(conn, "more than %d requests waiting for their turn"
                        % pacing.MAX_WAITING)
            return True
        self._later.add(start, "handle", conn, message)
        return True

    def _subscribe(self, conn: Conn, params: dict[str, Any]) -> dict[str, Any]:
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

    def _run_on_worker(self, conn: Conn, request_id: Any, fn: Callable, params: dict,
                       lane: str = "action") -> None:
        if lane in self._busy:
            self._later.add(time.monotonic() + pacing.REFUSAL_DELAY_S, "send", conn,
                            protocol.error(request_id, protocol.BUSY,
                                           "another %s is running" % lane))
            return
        self._busy.add(lane)
        conn.on_worker = True

        def post(name: str, data: dict[str, Any]) -> None:
            self._completed.append((conn, protocol.event(name, data)))
            self._wake()

        def work() -> None:
            _worker.post = post
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
            self._busy.discard(lane)
            self._wake()

        try:
            threading.Thread(target=work, name=THREAD_NAME + "-" + lane, daemon=True).start()
        except Exception as exc:
            self._busy.discard(lane)
            conn.on_worker = False
            self._send(conn, protocol.error(request_id, protocol.INTERNAL, repr(exc)))


def token_hex() -> str:
    import secrets  # TCP transport only (Windows): not imported on the Unix path

    return secrets.token_hex(32)


def _compare_digest(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a, b)
