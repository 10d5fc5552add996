"""HTTP to a local model server: only this host, bounded, keys sent as set."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.core.servers.http import Auth, LocalHttp, ServerHttpError


class Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None, bytes]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        Handler.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        if self.path == "/locked" and self.headers.get("Authorization") != "Bearer right":
            self._send(401, {"error": "unauthorized"})
        elif self.path == "/text":
            self._send(200, None, b"Ollama is running")
        elif self.path == "/broken":
            self._send(500, {"detail": "checkpoint not found"})
        else:
            self._send(200, {"path": self.path, "body": body.decode() or None})

    do_GET = do_POST = _answer

    def _send(self, code: int, data: object, raw: bytes | None = None) -> None:
        payload = raw if raw is not None else json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server():
    Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_json_in_and_out_text_answers_and_error_details(server) -> None:
    http = LocalHttp(server)
    assert http.post("/api/generate", {"keep_alive": 0}) == {
        "path": "/api/generate", "body": '{"keep_alive": 0}'}
    assert http.get("/text") == "Ollama is running"
    with pytest.raises(ServerHttpError, match="500 Internal Server Error: checkpoint not found"):
        http.get("/broken")


def test_keys_go_as_set_and_a_refusal_says_what_to_do(server) -> None:
    with pytest.raises(ServerHttpError, match="needs an API key") as info:
        LocalHttp(server).get("/locked")
    assert info.value.status == 401
    with pytest.raises(ServerHttpError, match="the API key kept for it was refused"):
        LocalHttp(server, Auth(bearer="wrong")).get("/locked")
    assert LocalHttp(server, Auth(bearer="right")).get("/locked")["path"] == "/locked"
    LocalHttp(server, Auth(basic="ada:s3cret")).get("/x")
    assert Handler.seen[-1][2] == "Basic YWRhOnMzY3JldA=="


def test_only_addresses_of_this_host_are_ever_asked() -> None:
    with pytest.raises(ValueError, match="not an address of this host"):
        LocalHttp("http://192.0.2.7:11434", Auth(bearer="k"))
    with pytest.raises(ValueError, match="not a local http endpoint"):
        LocalHttp("https://127.0.0.1:11434")
    LocalHttp("http://192.0.2.7:11434", local=frozenset({"192.0.2.7"}))  # this host's own


def test_a_server_that_never_answers_costs_the_timeout_and_no_more() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        http = LocalHttp(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.3)
        with pytest.raises(ServerHttpError, match="no answer in 0.3 s"):
            http.get("/system_stats")
    finally:
        listener.close()


def test_nobody_listening() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(ServerHttpError, match="connection refused"):
        LocalHttp(f"http://127.0.0.1:{port}").get("/")


@pytest.mark.parametrize("head", [b"Content-Length: 100000",
                                  # http.client lets go of its socket on this one
                                  b"Content-Length: 100000\r\nConnection: close"])
def test_a_server_that_drips_its_answer_is_cut_at_one_deadline(head: bytes) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def drip() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n")
            for _ in range(200):  # a byte every 0.05 s: each read is quick, the whole is not
                conn.sendall(b"{")
                time.sleep(0.05)
        except OSError:
            pass
        finally:
            conn.close()

    threading.Thread(target=drip, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(ServerHttpError, match="no answer in 0.5 s"):
            LocalHttp(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5).get("/")
        assert time.monotonic() - started < 2.0
    finally:
        listener.close()
