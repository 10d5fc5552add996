"""The server over a pipe (``serve --stdio``): what ``ssh host vram-steward
serve --stdio`` runs, so SSH does the authentication and no port is opened.

One JSON object per line each way.  The server speaks first, with
``{"wire", "type": "hello", "result"}``.  A request is ``{"wire", "id",
"method", "params"}``; its answer carries the same ``id`` with ``result``
or ``error`` and ``code``.  ``{"method": "subscribe"}`` starts the stream:
frames (``full``, ``delta``, ``ping``) are lines without an ``id``.
Requests run concurrently (an unload may take a minute; a snapshot does
not wait for it); the caller is the user running the server.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, BinaryIO

from app.core.serve.access import CONTROL, READ, Caller, own_user
from app.core.serve.api import ServerApi
from app.core.serve.frames import PING_S, Frames, StreamWriter, line
from app.core.serve.params import ApiError, wire_refusal
from app.core.wire.snapshot import WIRE_VERSION

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024
MAX_RUNNING = 16


def stdio_caller() -> Caller:
    user, uid = own_user()
    via = "ssh" if os.environ.get("SSH_CONNECTION") else "local"
    return Caller(user, uid, frozenset({READ, CONTROL}), via)


class StdioServer:
    def __init__(self, api: ServerApi, reader: BinaryIO, writer: BinaryIO,
                 caller: Caller | None = None) -> None:
        self.api = api
        self._in = reader
        self._out = writer
        self._caller = caller or stdio_caller()
        self._write_lock = threading.Lock()
        self._running = threading.BoundedSemaphore(MAX_RUNNING)
        self._streaming = False
        self._writer = StreamWriter(Frames(), deflate=False)
        self.closed = threading.Event()

    def run(self) -> None:
        """Answer until stdin ends (or the engine stops)."""
        try:
            hello = self.api.call("hello", {}, self._caller)
            self._send({"wire": WIRE_VERSION, "type": "hello", "result": hello["result"]})
            while not self.api.engine.stopped:
                raw = self._in.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                if len(raw) > MAX_LINE_BYTES:
                    self._send({"wire": WIRE_VERSION, "id": None, "code": "too_large",
                                "error": f"a request line is at most {MAX_LINE_BYTES} bytes"})
                    self._skip_rest(raw)
                    continue
                self._request(raw)
        except (BrokenPipeError, ConnectionError, ValueError):
            pass  # the client left
        finally:
            self.closed.set()

    def _skip_rest(self, raw: bytes) -> None:
        while raw and not raw.endswith(b"\n"):
            raw = self._in.readline(MAX_LINE_BYTES)

    def _request(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._send({"wire": WIRE_VERSION, "id": None, "code": "bad_request",
                        "error": f"not JSON: {exc}"})
            return
        ident = message.get("id") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            self._error(ident, ApiError('a request is {"id", "method", "params"}'))
            return
        if message.get("wire", WIRE_VERSION) != WIRE_VERSION:
            self._error(ident, wire_refusal(WIRE_VERSION, message.get("wire")))
            return
        if message["method"] == "subscribe":
            self._subscribe(ident)
            return
        if not self._running.acquire(blocking=False):
            self._error(ident, ApiError("too many requests at once", 429, "rate_limited"))
            return
        threading.Thread(target=self._answer, args=(ident, message), daemon=True,
                         name="vram-steward-stdio-call").start()

    def _answer(self, ident: Any, message: dict[str, Any]) -> None:
        try:
            result = self.api.call(message["method"], message.get("params"), self._caller)
            self._send({"id": ident, **result})
        except ApiError as exc:
            self._error(ident, exc)
        except Exception:
            log.exception("stdio request %r failed", message.get("method"))
            self._error(ident, ApiError("internal error (see the server's log)", 500,
                                        "internal"))
        finally:
            self._running.release()

    def _subscribe(self, ident: Any) -> None:
        """Start the stream; once started, a whole snapshot next (a client that
        lost frames asks again to find its place)."""
        self._send({"wire": WIRE_VERSION, "id": ident, "result": {"subscribed": True}})
        if self._streaming:
            self._writer.restart()
            return
        self._streaming = True
        threading.Thread(target=self._stream, daemon=True, name="vram-steward-stdio-stream"
                         ).start()

    def _stream(self) -> None:
        engine = self.api.engine
        writer = self._writer
        state = engine.state()
        try:
            while not engine.stopped and not self.closed.is_set():
                data = writer.next_bytes(state)
                if data is not None:
                    self._write(data)
                state = engine.wait_newer(writer.seq, PING_S)
        except (BrokenPipeError, ConnectionError, ValueError, OSError):
            self.closed.set()

    def _error(self, ident: Any, exc: ApiError) -> None:
        self._send({"wire": WIRE_VERSION, "id": ident, "error": str(exc), "code": exc.code})

    def _send(self, data: dict[str, Any]) -> None:
        self._write(line(data))

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            self._out.write(data)
            self._out.flush()
