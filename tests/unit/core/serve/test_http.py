"""The server over HTTP: tokens, scopes, versions, limits, the stream."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from app.core.remote.address import parse_address
from app.core.remote.client import RemoteClient
from app.core.remote.errors import RemoteError
from app.core.remote.http_transport import HttpTransport
from app.core.serve import http as serve_http
from app.core.serve.access import own_user, parse_tokens
from app.core.serve.api import ServerApi
from app.core.serve.http import ServeHttp
from app.core.serve.metrics import metrics_registry
from tests.unit.core.serve.conftest import serving

CONTROL_TOKEN = "c" * 24
READ_TOKEN = "r" * 24


@pytest.fixture
def server(demo_engine):
    grants = parse_tokens(f"{CONTROL_TOKEN} {own_user()[0]} read,control\n"
                          f"{READ_TOKEN} dashboards read\n")
    with serving(ServeHttp(("127.0.0.1", 0), ServerApi(demo_engine), grants, open_read=True,
                           metrics=metrics_registry(demo_engine.state))) as httpd:
        yield httpd


def client(server, token=None) -> RemoteClient:
    return RemoteClient(HttpTransport(parse_address(server.url), token, timeout_s=5.0))


def raw(server, method, path, body=None, headers=None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=5)
    conn.request(method, path, body, headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def test_reads_on_loopback_need_no_token_actions_do(server):
    c = client(server)
    assert c.snapshot().gpus
    with pytest.raises(RemoteError, match="--token-file") as info:
        c.free_cache(18822, 5.0)
    assert info.value.code == "unauthorized"


def test_a_control_token_acts_a_read_token_does_not(server):
    assert client(server, CONTROL_TOKEN).free_cache(18822, 5.0).ok
    with pytest.raises(RemoteError, match="no control scope") as info:
        client(server, READ_TOKEN).free_cache(18822, 5.0)
    assert info.value.code == "forbidden"


def test_a_wrong_token_is_refused_even_for_reads(server):
    with pytest.raises(RemoteError, match="wrong token") as info:
        client(server, "w" * 24).snapshot()
    assert info.value.code == "unauthorized"
    status, headers, _ = raw(server, "GET", "/metrics", headers={"Authorization": "Basic x"})
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")


def test_reads_need_a_token_when_the_server_says_so(server):
    server.open_read = False
    status, _, body = raw(server, "GET", "/metrics")
    assert status == 401 and b"token is required" in body
    status, _, body = raw(server, "GET", "/metrics",
                          headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert status == 200 and b"vram_steward_gpu_memory_used_bytes" in body


def test_a_client_of_another_wire_version_gets_a_clear_error(server):
    status, _, body = raw(server, "GET", "/api/v1/snapshot",
                          headers={"X-VRAM-Steward-Wire": "2"})
    answer = json.loads(body)
    assert status == 400 and answer["code"] == "version"
    assert "wire version 1" in answer["error"] and "'2'" in answer["error"]


def test_bad_bodies_are_refused_and_change_nothing(server, monkeypatch):
    headers = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    for body, code in ((b"{not json", 400), (b'["x"]', 400),
                       (b"x" * (serve_http.MAX_BODY_BYTES + 1), 413)):
        status, _, data = raw(server, "POST", "/api/v1/call", body, headers)
        assert status == code, data
        assert json.loads(data)["error"]
    status, _, _ = raw(server, "DELETE", "/api/v1/call")
    assert status == 501  # http.server: no such verb


def test_a_storm_from_one_address_is_slowed(server):
    server.rate.burst = 5
    server.rate.per_s = 0.1
    statuses = [raw(server, "GET", "/api/v1/hello")[0] for _ in range(8)]
    assert statuses[:5] == [200] * 5 and statuses[-1] == 429


def test_connections_over_the_limit_are_turned_away(server, monkeypatch):
    server._slots = threading.BoundedSemaphore(1)
    held = http.client.HTTPConnection(*server.server_address[:2], timeout=5)
    held.request("GET", "/api/v1/stream")
    stream = held.getresponse()
    assert stream.status == 200
    assert raw(server, "GET", "/api/v1/hello")[0] == 503
    held.close()


def test_the_stream_sends_a_full_snapshot_then_patches_that_rebuild_each_one(server,
                                                                             demo_engine,
                                                                             monkeypatch):
    made = {}
    publish = demo_engine._publish

    def keep(snapshot):
        made[snapshot.monotonic] = snapshot
        publish(snapshot)

    monkeypatch.setattr(demo_engine, "_publish", keep)
    c = client(server)
    kinds = []
    frames = c.transport.frames

    def counted():
        for frame in frames():
            kinds.append(frame["type"])
            yield frame

    c.transport.frames = counted
    got = []
    for snapshot in c.snapshots():
        got.append(snapshot)
        if len(got) == 8:
            break
    c.close()
    assert kinds[0] == "full" and "delta" in kinds
    rebuilt = [s for s in got if s.monotonic in made]
    assert len(rebuilt) >= 6
    for s in rebuilt:
        assert s == made[s.monotonic]  # byte for byte what the server made


def test_the_stream_is_deflated_for_clients_that_ask(server):
    import zlib

    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=5)
    conn.request("GET", "/api/v1/stream", headers={"Accept-Encoding": "deflate"})
    resp = conn.getresponse()
    assert resp.getheader("Content-Encoding") == "deflate"
    inflate, text = zlib.decompressobj(-15), b""
    while b"\n" not in text:
        text += inflate.decompress(resp.read1(1 << 16))
    conn.close()
    frame = json.loads(text.split(b"\n")[0])
    assert frame["wire"] == 1 and frame["type"] == "full" and frame["snapshot"]["gpus"]


def test_landing_page_and_unknown_paths(server):
    status, _, body = raw(server, "GET", "/")
    assert status == 200 and b"/metrics" in body
    assert raw(server, "GET", "/nothing")[0] == 404


def test_a_request_trickled_byte_by_byte_is_cut_off(server, monkeypatch):
    import socket
    import time

    monkeypatch.setattr(serve_http, "REQUEST_TIMEOUT_S", 0.6)
    sock = socket.create_connection(server.server_address[:2], timeout=5)
    sock.sendall(b"GET / HTTP/1.1\r\n")
    started = time.monotonic()
    closed = False
    while time.monotonic() - started < 5:
        try:
            sock.sendall(b"X")
        except OSError:
            closed = True
            break
        time.sleep(0.1)
        sock.setblocking(False)
        try:
            if sock.recv(1) == b"":
                closed = True
                break
        except BlockingIOError:
            pass
        finally:
            sock.setblocking(True)
    sock.close()
    assert closed and time.monotonic() - started < 3
    assert raw(server, "GET", "/api/v1/hello")[0] == 200  # others are still served


def test_a_refused_action_is_in_the_audit_log(server, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="app.serve.audit")
    with pytest.raises(RemoteError):
        client(server, READ_TOKEN).free_cache(18822, 5.0)
    assert any("dashboards via http: free_cache refused" in r.getMessage()
               for r in caplog.records)


def test_a_tls_server_that_is_full_closes_new_connections_at_once(demo_engine, tmp_path):
    import shutil
    import socket
    import ssl
    import subprocess
    import time

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt package openssl)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd = ServeHttp(("127.0.0.1", 0), ServerApi(demo_engine), [], open_read=True, tls=context)
    httpd._slots = threading.BoundedSemaphore(1)
    with serving(httpd):
        idle = socket.create_connection(httpd.server_address[:2])  # holds the one slot
        time.sleep(0.2)
        silent = [socket.create_connection(httpd.server_address[:2]) for _ in range(3)]
        for sock in silent:  # never shake hands: closed, and the accepting thread goes on
            sock.settimeout(3)
            assert sock.recv(1) == b""
        idle.close()
        time.sleep(0.2)
        transport = HttpTransport(parse_address(httpd.url.replace("http:", "https:")),
                                  ca_file=str(cert), timeout_s=5)
        assert RemoteClient(transport).hello()["app"]

