"""End to end: a client and real ``serve`` processes over HTTP(S), when things go wrong.

* a server killed (SIGKILL) mid-stream: ``RemoteClient.snapshots()`` raises
  ``RemoteUnavailable`` at once (bounded, never a hang) and ``RemoteSource.read()``
  raises ``SourceUnavailable`` saying why;
* a self-signed certificate: without ``--tls-ca`` one line naming the
  certificate and ``--tls-ca``; with it, the status;
* ``--listen 0.0.0.0:0`` without TLS is refused (exit 2) unless ``--insecure``;
* a server of another wire version (a stub): one clear line, exit 2, no
  traceback, whether it refuses our version or answers in its own; a client of
  another wire version gets a 400 with code ``version`` from a real server,
  over HTTP and over ``--stdio``.

The servers sample the ABI fake of libnvidia-ml; skips where it cannot be built.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.core.monitor.source import SourceUnavailable
from app.core.remote import http_transport
from app.core.remote.client import open_client
from app.core.remote.errors import RemoteError, RemoteUnavailable
from app.core.remote.source import RemoteSource
from tests.e2e import remote_world as rw
from tests.e2e.remote_world import REPO, Host, Serve, cli
from tests.fakes.nvml_abi import FakeGpu, FakeNvml
from tests.fakes.processes import read_line, wait_for

UUID = "GPU-7e570001-1b2c-4d5e-8f90-a1b2c3d4e5f6"

pytestmark = pytest.mark.skipif(rw.unavailable_reason() is not None,
                                reason=rw.unavailable_reason() or "")


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    made = Host(FakeNvml(gpus=[FakeGpu("NVIDIA L40S", UUID, total=48_305_799_168,
                                       used=12_345_678_901, reserved=456_789_012)]))
    yield made
    made.close()


def test_a_server_killed_mid_stream_ends_the_stream_and_the_source(host):
    server = Serve(host)
    source = RemoteSource(lambda: open_client(server.url, timeout_s=5.0))
    client = open_client(server.url, timeout_s=5.0)
    seen: list[Any] = []
    ended: list[BaseException] = []

    def follow() -> None:
        try:
            for snapshot in client.snapshots():
                seen.append(snapshot)
        except BaseException as exc:
            ended.append(exc)

    reader = threading.Thread(target=follow, daemon=True)
    try:
        source.open()
        assert [g.uuid for g in source.read()] == [UUID]
        reader.start()
        wait_for("a full frame and a delta", lambda: len(seen) >= 2, timeout=15, every=0.05)
        assert seen[-1].gpus[0].memory_used == 12_345_678_901
        server.stop(signal.SIGKILL)
        reader.join(timeout=10)
        assert not reader.is_alive(), "snapshots() hung on a dead server"
        (error,) = ended
        assert isinstance(error, RemoteUnavailable), repr(error)
        assert str(error) in (f"{server.url} closed the stream",
                              f"{server.url} closed the connection")

        def why() -> str | None:
            try:
                source.read()
            except SourceUnavailable as exc:
                return exc.reason
            return None

        reason = wait_for("read() to fail", why, timeout=10, every=0.05)
        assert server.url in reason and "closed" in reason
    finally:
        source.close()
        client.close()
        server.stop(signal.SIGKILL)


def test_a_self_signed_certificate_needs_tls_ca(host, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a certificate: {made.stderr.strip()}")
    server = Serve(host, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert server.url.startswith("https://127.0.0.1:")
        done = cli(host, "status", "--json", "--host", server.url)
        assert done.returncode == 2 and done.stdout == "", done
        (line,) = done.stderr.splitlines()
        assert "certificate is not trusted" in line and "--tls-ca FILE" in line, line
        done = cli(host, "status", "--json", "--host", server.url, "--tls-ca", str(cert))
        assert done.returncode == 0, done.stderr
        assert [g["uuid"] for g in json.loads(done.stdout)["gpus"]] == [UUID]
        plain = "http://" + server.url.removeprefix("https://")
        done = cli(host, "status", "--host", plain)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done
    finally:
        server.stop()


def test_serve_on_every_address_needs_tls_or_insecure(host):
    done = cli(host, "serve", "--listen", "0.0.0.0:0", timeout=30)
    assert done.returncode == 2 and "listening" not in done.stdout
    assert done.stderr.strip() == (
        "VRAM Steward: --listen 0.0.0.0: an address other than loopback needs TLS (--tls-cert "
        "FILE --tls-key FILE), or --insecure to send tokens and process details in the clear")
    done = cli(host, "serve", "--listen", "127.0.0.1:0", "--tls-cert", "c.pem", timeout=30)
    assert done.returncode == 2 and "--tls-cert and --tls-key go together" in done.stderr
    server = Serve(host, "--insecure", listen="0.0.0.0:0")
    try:
        assert server.url.startswith("http://0.0.0.0:")
        assert "serving plain HTTP on 0.0.0.0" in server.errors()
    finally:
        server.stop()


class OtherWire(BaseHTTPRequestHandler):
    """A server of wire version 2: refuses our version when ``strict``, else
    answers in its own."""

    strict = True

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self) -> None:
        theirs = self.headers.get("X-VRAM-Steward-Wire")
        if self.strict and theirs != "2":
            status, body = 400, {"wire": 2, "code": "version", "error": (
                f"this server speaks wire version 2, the client {theirs!r}: use the same "
                "VRAM Steward version on both sides")}
        elif self.path == "/api/v1/stream":
            status, body = 200, {"type": "full", "seq": 1,
                                 "snapshot": {"wire": 2, "gpus": [], "source": "nvml"}}
        else:
            status, body = 200, {"wire": 2, "result": {"gpus": [], "source": "nvml"}}
        raw = json.dumps(body).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-VRAM-Steward-Wire", "2")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_server_of_another_wire_version_is_one_clear_line(host):
    for strict in (True, False):
        handler = type("Handler", (OtherWire,), {"strict": strict})
        stub = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=stub.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{stub.server_address[1]}"
        try:
            for args in (["status", "--json"], ["agents"]):
                done = cli(host, *args, "--host", url)
                assert done.returncode == 2 and done.stdout == "", done
                (line,) = done.stderr.splitlines()
                assert line.startswith(f"VRAM Steward: {url}") and "wire version 2" in line, line
            if not strict:
                assert "this one speaks 1: upgrade VRAM Steward here" in line
                with pytest.raises(RemoteError, match="wire version 2") as caught:
                    next(open_client(url, timeout_s=5.0).snapshots())
                assert caught.value.code == "version"
        finally:
            stub.shutdown()
            stub.server_close()


def test_a_client_of_another_wire_version_gets_a_400(host):
    server = Serve(host)
    try:
        address = server.url.removeprefix("http://")
        for verb, path, body in (("GET", "/api/v1/snapshot", None),
                                 ("POST", "/api/v1/call", b'{"method": "hello"}')):
            conn = http.client.HTTPConnection(address, timeout=10)
            conn.request(verb, path, body, {"X-VRAM-Steward-Wire": "2"})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            conn.close()
            assert resp.status == 400 and answer["code"] == "version", answer
            assert "speaks wire version 1" in answer["error"]
    finally:
        server.stop()
    stdio = subprocess.Popen([sys.executable, "-m", "app", "serve", "--stdio", "--no-history"],
                             env=host.env(), cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert stdio.stdin is not None and stdio.stdout is not None
        hello = json.loads(_line(stdio))
        assert hello["type"] == "hello" and hello["wire"] == 1
        stdio.stdin.write(b'{"wire": 2, "id": 7, "method": "hello"}\n')
        stdio.stdin.flush()
        answer = json.loads(_line(stdio))
        assert answer["id"] == 7 and answer["code"] == "version", answer
        stdio.stdin.close()
        assert stdio.wait(15) == 0
    finally:
        if stdio.poll() is None:
            stdio.kill()
            stdio.wait()


def _line(proc: subprocess.Popen, timeout: float = 30.0) -> bytes:
    raw = read_line(proc, timeout)
    assert raw, "the stdio server said nothing"
    return raw


def test_a_server_that_stops_answering_is_given_up_on(host, monkeypatch):
    """A stopped server (SIGSTOP) is given up on after two keepalive periods and
    the timeout (the period made 1 s here), never waited for forever."""
    monkeypatch.setattr(http_transport, "KEEPALIVE_S", 1.0)
    server = Serve(host)
    client = open_client(server.url, timeout_s=1.0)
    stream = client.transport.frames()
    try:
        assert next(stream)["type"] == "full"
        os.kill(server.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RemoteUnavailable, match="no answer within"):
            for _ in range(1000):
                next(stream)
        assert time.monotonic() - started < 2 * 1.0 + 1.0 + 5.0
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        client.close()
        server.stop()


def test_serve_ends_on_a_sigterm_whichever_of_its_threads_takes_it(host):
    """The kernel hands a process's signal to any thread that does not block it
    (after SIGSTOP and SIGCONT, as with Ctrl-Z and fg, often not the main one);
    a signal sent to a thread's id goes to that thread."""
    server = Serve(host)
    try:
        pid = server.proc.pid
        threads = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
        assert threads, "serve runs its HTTP server and sampler on threads of their own"
        time.sleep(1.0)  # its main thread settles into its wait after saying "listening on"
        os.kill(threads[-1], signal.SIGTERM)
        assert server.proc.wait(5) == 0, server.errors()
        assert "app.serve: stopped" in server.errors()
    finally:
        server.stop()
