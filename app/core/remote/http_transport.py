"""A server over HTTP(S): one request per call, a long response for the stream.

A token goes in ``Authorization: Bearer``.  HTTPS verifies the server's
certificate against the system's authorities, or the one file the user
names (``ca_file``: a self-signed certificate).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import zlib
from collections.abc import Iterator
from typing import Any

from app.core.remote.address import RemoteAddress
from app.core.remote.errors import RemoteError, RemoteUnavailable, check_wire
from app.core.serve.frames import KEEPALIVE_S
from app.core.wire.snapshot import WIRE_VERSION

WIRE_HEADER = "X-VRAM-Steward-Wire"
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class HttpTransport:
    def __init__(self, address: RemoteAddress, token: str | None = None,
                 ca_file: str | None = None, timeout_s: float = 10.0) -> None:
        self.address = address
        self.token = token
        self.timeout_s = timeout_s
        self._context: ssl.SSLContext | None = None
        self._streams: set[socket.socket] = set()  # each stream's, to end it
        if address.scheme == "https":
            self._context = ssl.create_default_context(cafile=ca_file)

    @property
    def url(self) -> str:
        return self.address.url

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float | None = None) -> Any:
        body = json.dumps({"method": method, "params": params or {}}).encode()
        conn = self._connect(timeout_s or self.timeout_s)
        try:
            with self._errors():
                conn.request("POST", "/api/v1/call", body, self._headers(
                    {"Content-Type": "application/json"}))
                resp = conn.getresponse()
                raw = resp.read(MAX_ANSWER_BYTES)
            return self._result(resp.status, raw)
        finally:
            conn.close()

    def frames(self) -> Iterator[dict[str, Any]]:
        """The stream's frames, as they come; RemoteUnavailable when it ends."""
        wait_s = KEEPALIVE_S * 2 + self.timeout_s  # a ping comes every KEEPALIVE_S
        conn = self._connect(wait_s)
        sock = None
        try:
            with _Translate(self.url, wait_s):
                conn.connect()
                # Kept here: http.client lets go of it once the answer says "Connection: close".
                sock = conn.sock
                self._streams.add(sock)
                conn.request("GET", "/api/v1/stream", headers=self._headers(
                    {"Accept-Encoding": "deflate"}))
                resp = conn.getresponse()
                if resp.status != 200:
                    self._result(resp.status, resp.read(MAX_ANSWER_BYTES))
                inflate = zlib.decompressobj(-15) \
                    if resp.getheader("Content-Encoding") == "deflate" else None
                pending = b""
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        raise RemoteUnavailable(f"{self.url} closed the stream")
                    pending += inflate.decompress(chunk) if inflate is not None else chunk
                    *lines, pending = pending.split(b"\n")
                    for raw in lines:
                        yield _frame(raw, self.url)
        finally:
            if sock is not None:
                self._streams.discard(sock)
            conn.close()

    def close(self) -> None:
        """End the streams (calls hold nothing between them): a read blocked on
        one returns (the heartbeat's way to end a silent connection)."""
        for sock in list(self._streams):
            shut_socket(sock)

    # -- pieces -----------------------------------------------------------------
    def _connect(self, timeout_s: float) -> http.client.HTTPConnection:
        host, port = self.address.host, self.address.port
        if self._context is not None:
            return http.client.HTTPSConnection(host, port, timeout=timeout_s,
                                               context=self._context)
        return http.client.HTTPConnection(host, port, timeout=timeout_s)

    def _headers(self, extra: dict[str, str]) -> dict[str, str]:
        headers = {WIRE_HEADER: str(WIRE_VERSION), **extra}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _result(self, status: int, raw: bytes) -> Any:
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise RemoteError(f"{self.url} did not answer as a VRAM Steward server "
                              f"(HTTP {status})", "protocol") from None
        if not isinstance(data, dict):
            raise RemoteError(f"{self.url} did not answer as a VRAM Steward server",
                              "protocol")
        if status != 200:
            code = str(data.get("code") or "error")
            message = str(data.get("error") or f"HTTP {status}")
            if code == "unauthorized" and not self.token and "--token-file" not in message:
                message += " (pass --token-file FILE or set VRAM_STEWARD_TOKEN)"
            raise RemoteError(f"{self.url}: {message}", code)
        check_wire(data, self.url)
        return data.get("result")

    def _errors(self) -> Any:
        return _Translate(self.url, self.timeout_s)


class _Translate:
    """Socket and TLS failures as RemoteError in the user's words."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, _tb: Any) -> None:
        if exc is None or isinstance(exc, RemoteError):
            return
        if isinstance(exc, ssl.SSLCertVerificationError):
            raise RemoteError(f"{self.url}: the server's certificate is not trusted "
                              f"({exc.verify_message}); for a self-signed certificate pass "
                              "--tls-ca FILE", "tls") from None
        if isinstance(exc, ssl.SSLError):
            raise RemoteError(f"{self.url}: TLS failed ({exc.reason}); is it an http:// "
                              "server?", "tls") from None
        if isinstance(exc, ConnectionRefusedError):
            raise RemoteUnavailable(f"cannot reach {self.url}: connection refused (is "
                                    "`vram-steward serve` running there?)") from None
        if isinstance(exc, (TimeoutError, socket.timeout)):
            raise RemoteUnavailable(f"{self.url}: no answer within "
                                    f"{self.timeout_s:g} s") from None
        if isinstance(exc, (http.client.RemoteDisconnected, http.client.IncompleteRead,
                            ConnectionError)):
            raise RemoteUnavailable(f"{self.url} closed the connection") from None
        if isinstance(exc, (OSError, http.client.HTTPException)):
            raise RemoteUnavailable(f"cannot reach {self.url}: {exc}") from None


def _frame(raw: bytes, url: str) -> dict[str, Any]:
    try:
        frame = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RemoteError(f"{url} sent a frame that is not JSON", "protocol") from None
    if not isinstance(frame, dict):
        raise RemoteError(f"{url} sent a frame that is not an object", "protocol")
    return frame


def shut(conn: http.client.HTTPConnection) -> None:
    """End ``conn``'s exchange from another thread: a read blocked on it returns."""
    sock = conn.sock
    if sock is not None:
        shut_socket(sock)


def shut_socket(sock: socket.socket) -> None:
    """Shut ``sock``'s connection under any TLS on it: ``SSLSocket.shutdown``
    would also drop its TLS state under a reader still using it."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass
