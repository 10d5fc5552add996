"""HTTP to a model server's API on this host: JSON in, JSON out, bounded.

Every request has a timeout and a size bound, so a server that hangs or
floods costs one worker a few seconds and nothing else.  Only addresses of
this host are ever asked (a key configured for a server is sent to nothing
else), and answers are parsed as JSON only.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.core.remote.http_transport import shut, shut_socket

MAX_BODY_BYTES = 4 * 1024 * 1024


class ServerHttpError(Exception):
    """No usable answer: refused, timed out, not JSON, or an error status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Auth:
    """A per-server credential from the settings file."""

    bearer: str | None = None  # "Authorization: Bearer …" (LM Studio, vLLM, text-generation-webui)
    basic: str | None = None  # "user:password" (A1111's --api-auth)
    admin: str | None = None  # bearer for model loading (text-generation-webui's --admin-key)

    def header(self, admin: bool = False) -> str | None:
        if admin and self.admin:
            return f"Bearer {self.admin}"
        if self.bearer:
            return f"Bearer {self.bearer}"
        if self.basic:
            return "Basic " + base64.b64encode(self.basic.encode()).decode("ascii")
        return None


class LocalHttp:
    """JSON requests to one endpoint (``http://127.0.0.1:PORT``)."""

    def __init__(self, endpoint: str, auth: Auth | None = None, timeout_s: float = 2.0,
                 local: frozenset[str] = frozenset({"127.0.0.1", "::1", "localhost"})) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"not a local http endpoint: {endpoint!r}")
        if parts.hostname not in local:
            raise ValueError(f"{parts.hostname} is not an address of this host")
        self.endpoint = endpoint
        self.host = parts.hostname
        self.port = parts.port
        self.auth = auth
        self.timeout_s = timeout_s

    def get(self, path: str, timeout_s: float | None = None) -> Any:
        return self.request("GET", path, None, timeout_s)

    def post(self, path: str, body: Any = None, timeout_s: float | None = None,
             admin: bool = False) -> Any:
        return self.request("POST", path, {} if body is None else body, timeout_s, admin)

    def request(self, method: str, path: str, body: Any, timeout_s: float | None = None,
                admin: bool = False) -> Any:
        """The answer's JSON (None for an empty body); raises ServerHttpError."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        headers = {"Accept": "application/json", "Connection": "close"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        header = self.auth.header(admin) if self.auth else None
        if header:
            headers["Authorization"] = header
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        # One deadline for the whole exchange: a server that drips a byte at a time
        # never waits out a per-read timeout.  At the deadline the socket is shut.
        expired = threading.Event()
        # The socket itself: once an answer says "Connection: close", http.client
        # lets go of ``conn.sock`` while the answer is still read from it.
        held: list[socket.socket] = []
        watchdog = threading.Timer(timeout, _cut, (conn, held, expired))
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect()
            if conn.sock is not None:
                held.append(conn.sock)
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read(MAX_BODY_BYTES + 1)
        except TimeoutError:
            raise ServerHttpError(f"no answer in {timeout:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set():
                raise ServerHttpError(f"no answer in {timeout:g} s") from None
            raise ServerHttpError(_why(exc)) from None
        finally:
            watchdog.cancel()
            conn.close()
        if expired.is_set():
            raise ServerHttpError(f"no answer in {timeout:g} s")
        if len(raw) > MAX_BODY_BYTES:
            raise ServerHttpError(f"answer over {MAX_BODY_BYTES // 1024 // 1024} MiB")
        if resp.status in (401, 403):
            raise ServerHttpError(
                f"{resp.status} {resp.reason}: "
                + ("the API key kept for it was refused" if header else
                   "it needs an API key: keep it with `vram-steward server-key KIND`"),
                resp.status)
        if resp.status >= 400:
            raise ServerHttpError(f"{resp.status} {resp.reason}: {_detail(raw)}", resp.status)
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text  # a plain-text answer ("OK", "Ollama is running")


def _cut(conn: http.client.HTTPConnection, held: list[socket.socket],
         expired: threading.Event) -> None:
    expired.set()
    if held:
        shut_socket(held[0])
    else:
        shut(conn)


def _why(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (not listening there)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _detail(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200] or "no detail"
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            if isinstance(data.get(key), str):
                return data[key][:200]
            if isinstance(data.get(key), dict) and isinstance(data[key].get("message"), str):
                return data[key]["message"][:200]
    return text[:200]


__all__ = ["Auth", "LocalHttp", "MAX_BODY_BYTES", "ServerHttpError"]
