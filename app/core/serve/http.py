"""The server over HTTP(S): the API, the live stream and ``/metrics``.

Routes: ``GET /`` (what is here), ``GET /metrics`` (Prometheus),
``GET /api/v1/hello``, ``GET /api/v1/snapshot``, ``GET /api/v1/stream``
(newline-delimited JSON frames; raw deflate when asked with
``Accept-Encoding: deflate``), ``POST /api/v1/call`` (``{"method",
"params"}``).  A token comes as ``Authorization: Bearer <token>``.

Limits keep one client from taking the server: at most
``MAX_CONNECTIONS`` at once, a request must arrive within
``REQUEST_TIMEOUT_S``, a body is at most ``MAX_BODY_BYTES``, and each
client address gets ``RATE_PER_S`` requests a second (burst ``RATE_BURST``).
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from app import __version__
from app.core.serve.access import ANONYMOUS, READ, AccessError, Caller, Grant, find_grant
from app.core.serve.api import ServerApi
from app.core.serve.frames import KEEPALIVE_S, PING_S, Frames, StreamWriter
from app.core.serve.limits import RateLimiter
from app.core.serve.params import ApiError, wire_refusal
from app.core.wire.snapshot import WIRE_VERSION

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 10.0
MAX_BODY_BYTES = 64 * 1024
RATE_PER_S = 20.0
RATE_BURST = 40
WIRE_HEADER = "X-VRAM-Steward-Wire"


class ServeHttp(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], api: ServerApi, grants: list[Grant],
                 open_read: bool, metrics: Any = None,
                 tls: ssl.SSLContext | None = None) -> None:
        """``open_read``: reads need no token (a loopback server without a
        token file of the user's); ``metrics``: the Prometheus registry (None:
        no ``/metrics``)."""
        self.api = api
        self.grants = grants
        self.open_read = open_read
        self.metrics = metrics
        self.frames = Frames()
        self.rate = RateLimiter(RATE_PER_S, RATE_BURST)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True,
                                          do_handshake_on_connect=False)
        self.scheme = "https" if tls is not None else "http"

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{shown}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # Full: said in plain HTTP, never waiting on the peer (a TLS peer has not
            # even shaken hands yet: it is only closed).  This runs on the accepting thread.
            if not isinstance(request, ssl.SSLSocket):
                try:
                    request.setblocking(False)
                    request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """One connection.  A request must arrive whole within ``REQUEST_TIMEOUT_S``
    (a peer trickling a byte at a time is cut off), and so must each next
    request on a kept-alive connection."""

    server: ServeHttp
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S
    server_version = f"vram-steward/{__version__}"
    _deadline: threading.Timer | None = None

    def setup(self) -> None:
        super().setup()
        self._arm()

    def finish(self) -> None:
        self._disarm()
        super().finish()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = threading.Timer(REQUEST_TIMEOUT_S, self._too_slow)
        self._deadline.daemon = True
        self._deadline.start()

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # -- routes -----------------------------------------------------------------
    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, verb: str) -> None:
        try:
            self._serve_one(verb)
        finally:
            self._arm()  # the next request on this connection has its own deadline

    def _serve_one(self, verb: str) -> None:
        try:
            if not self.server.rate.allow(self.client_address[0]):
                raise ApiError("too many requests: slow down", 429, "rate_limited")
            path = urlsplit(self.path).path
            if verb == "GET":
                self._disarm()  # the request is whole: answering may take long (a stream)
            self._check_wire()
            if verb == "GET" and path == "/":
                return self._landing()
            if verb == "GET" and path == "/metrics" and self.server.metrics is not None:
                self._caller(READ)
                return self._metrics()
            if verb == "GET" and path in ("/api/v1/hello", "/api/v1/snapshot"):
                caller = self._caller(READ)
                return self._json(200, self.server.api.call(path.rsplit("/", 1)[1], {}, caller))
            if verb == "GET" and path == "/api/v1/stream":
                return self._stream(self._caller(READ))
            if verb == "POST" and path == "/api/v1/call":
                body = self._body()
                caller = self._caller(None)
                return self._json(200, self.server.api.call(body["method"], body.get("params"),
                                                            caller))
            raise ApiError(f"nothing at {verb} {path}", 404, "not_found")
        except (ApiError, AccessError) as exc:
            self._json(exc.status, {"wire": WIRE_VERSION, "error": str(exc), "code": exc.code},
                       www_auth=exc.status == 401)
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True
        except Exception:
            log.exception("request %s %s failed", verb, self.path)
            self._json(500, {"wire": WIRE_VERSION, "error": "internal error (see the "
                             "server's log)", "code": "internal"})

    def _check_wire(self) -> None:
        theirs = self.headers.get(WIRE_HEADER)
        if theirs is not None and theirs.strip() != str(WIRE_VERSION):
            raise wire_refusal(WIRE_VERSION, theirs.strip())

    def _caller(self, scope: str | None) -> Caller:
        """Who asks.  ``scope``: what the route needs (None: the method decides)."""
        header = self.headers.get("Authorization") or ""
        kind, _, token = header.partition(" ")
        if header:
            if kind.lower() != "bearer" or not token.strip():
                raise AccessError("Authorization must be 'Bearer <token>'", 401, "unauthorized")
            grant = find_grant(self.server.grants, token.strip())
            if grant is None:
                raise AccessError("wrong token", 401, "unauthorized")
            return Caller(grant.user, grant.uid, grant.scopes, "http")
        if self.server.open_read and scope in (READ, None):
            return Caller(ANONYMOUS, None, frozenset({READ}), "http")
        raise AccessError("a token is required (Authorization: Bearer <token>)", 401,
                          "unauthorized")

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            raise ApiError("Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(f"request body over {MAX_BODY_BYTES} bytes", 413, "too_large")
        raw = self.rfile.read(length)
        self._disarm()  # whole: an action may take minutes
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("method"), str):
            raise ApiError('the body is {"method": "...", "params": {...}}')
        return body

    # -- answers ----------------------------------------------------------------
    def _json(self, status: int, data: Any, www_auth: bool = False) -> None:
        raw = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header(WIRE_HEADER, str(WIRE_VERSION))
        if www_auth:
            self.send_header("WWW-Authenticate", 'Bearer realm="vram-steward"')
        if status == 429:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(raw)

    def _landing(self) -> None:
        text = (f"VRAM Steward {__version__} server (wire version {WIRE_VERSION})\n"
                "/metrics          Prometheus metrics\n"
                "/api/v1/snapshot  the latest snapshot (JSON)\n"
                "/api/v1/stream    live snapshots (newline-delimited JSON)\n"
                "/api/v1/call      POST {\"method\", \"params\"}\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def _metrics(self) -> None:
        from app.core.serve.metrics import render

        body, content_type = render(self.server.metrics, self.headers.get("Accept"))
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, caller: Caller) -> None:
        deflate = "deflate" in (self.headers.get("Accept-Encoding") or "").lower()
        writer = StreamWriter(self.server.frames, deflate)
        engine = self.server.api.engine
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header(WIRE_HEADER, str(WIRE_VERSION))
        if deflate:
            self.send_header("Content-Encoding", "deflate")
        self.send_header("Connection", "close")
        self.end_headers()
        self.connection.settimeout(KEEPALIVE_S * 2)
        state = engine.state()
        while not engine.stopped:
            data = writer.next_bytes(state)
            if data is not None:
                self.wfile.write(data)
                self.wfile.flush()
            state = engine.wait_newer(writer.seq, PING_S)
