from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.agent import protocol, runtime
from app.agent.server import Options, Server, peer_allowed, peer_uid

from .conftest import BOOTSTRAP, PYTHON, Client, short_tmpdir, wait_line


@pytest.fixture(scope="module")
def agent():
    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, partial_timeout=0.5, tick_interval=0.05,
                         idle_timeout=30)
    with open(os.path.join(rt, "agents", "%d.json" % os.getpid())) as f:
        entry = json.load(f)
    yield entry
    runtime.stop()
    assert not os.path.exists(os.path.join(rt, "agents", "%d.json" % os.getpid()))
    assert not os.path.exists(entry["address"])
    shutil.rmtree(rt, ignore_errors=True)


def test_start_is_idempotent(agent):
    assert runtime.start() is True and runtime.is_running()
    assert agent["pid"] == os.getpid() and agent["transport"] == "unix"
    assert oct(os.stat(agent["address"]).st_mode & 0o777) == oct(0o600)


def test_hello_ping_report(agent):
    c = Client(agent["address"])
    assert c.hello == {"hello": {"protocol": 1, "agent": "0.1.0", "pid": os.getpid(), "auth": None}}
    assert c.call("ping") == {"id": 1, "result": {"pong": True}}
    assert c.call("hello")["result"]["pid"] == os.getpid()
    rep = c.call("report", {"models": False})["result"]
    assert rep["pid"] == os.getpid() and rep["torch_status"] in ("loaded", "torch not loaded")
    assert rep["models"] == [] and rep["cuda_initialized"] is False and rep["devices"] == []
    c.close()


def test_unknown_method_and_bad_requests_keep_connection(agent):
    c = Client(agent["address"])
    assert c.call("nope")["error"]["code"] == "unknown_method"
    c.send_raw(protocol.encode({"id": [1], "method": "ping"}))
    assert c.recv()["error"]["code"] == "bad_request"
    c.send_raw(protocol.encode({"id": 5, "method": "ping", "params": 3}))
    assert c.recv() == {"id": 5, "error": {"code": "bad_request",
                                           "message": "params must be an object"}}
    assert c.call("report", {"models": "yes"})["error"]["code"] == "bad_params"
    assert c.call("subscribe", {"events": "oom"})["error"]["code"] == "bad_params"
    assert c.call("ping")["result"] == {"pong": True}
    c.close()


def test_oversize_frame_gets_error_then_close(agent):
    c = Client(agent["address"])
    c.send_raw(struct.pack(">I", protocol.MAX_FRAME_BYTES + 1))
    assert c.recv()["error"]["code"] == "bad_request"
    assert c.closed_by_peer()


def test_invalid_json_closes(agent):
    c = Client(agent["address"])
    c.send_raw(struct.pack(">I", 3) + b"\xff\x00{")
    assert c.recv()["error"]["code"] == "bad_request"
    assert c.closed_by_peer()


def test_partial_frame_then_silence_is_closed(agent):
    c = Client(agent["address"])
    c.send_raw(struct.pack(">I", 100) + b"{")
    t0 = time.monotonic()
    assert c.closed_by_peer(timeout=5)
    assert 0.3 < time.monotonic() - t0 < 3


def test_connection_limit_evicts_the_least_recently_active(agent):
    clients = [Client(agent["address"]) for _ in range(16)]
    for c in clients:
        assert c.call("ping")["result"] == {"pong": True}
    extra = Client(agent["address"])  # over the limit: gets in all the same
    assert extra.call("ping")["result"] == {"pong": True}
    evicted = clients[0].recv()
    assert evicted["id"] is None and evicted["error"]["code"] == "busy"
    assert "room" in evicted["error"]["message"]
    assert clients[0].closed_by_peer()
    for c in clients[1:] + [extra]:
        assert c.call("ping")["result"] == {"pong": True}
        c.close()


def test_slow_reader_does_not_block_others(agent):
    slow = Client(agent["address"])
    req = b"".join(protocol.encode(protocol.request(i, "report", {"models": False}))
                   for i in range(3000))
    slow.sock.setblocking(False)
    try:
        slow.sock.sendall(req)
    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
        pass
    fast = Client(agent["address"])
    t0 = time.monotonic()
    for _ in range(5):
        assert fast.call("ping")["result"] == {"pong": True}
    assert time.monotonic() - t0 < 2
    fast.close()
    slow.close()


def test_events_reach_subscribers(agent):
    sub = Client(agent["address"])
    other = Client(agent["address"])
    assert sub.call("subscribe", {"events": ["oom", "bogus"]})["result"] == {"events": ["oom"]}
    before = sub.call("report", {"models": False})["result"]["oom_events"]
    # what the allocator would call (from a user thread, GIL held)
    from app.agent.introspect import CudaWatch
    CudaWatch._observer(0, 1024, 2048, 512)
    msg = sub.recv()
    assert msg["event"] == "oom" and msg["data"]["alloc"] == 1024
    assert sub.call("report", {"models": False})["result"]["oom_events"] == before + 1
    runtime.current().server.emit("alloc_retries", {"device": 0})  # not subscribed: not sent
    assert other.call("ping")["result"] == {"pong": True}
    assert sub.call("ping")["result"] == {"pong": True}
    sub.close()
    other.close()


def test_peer_allowed():
    assert peer_allowed(1000, 1000)
    assert peer_allowed(0, 1000)  # root: the system-wide server
    assert not peer_allowed(1001, 1000)
    assert not peer_allowed(None, 1000)
    assert not peer_allowed(True, 1)


def test_peer_uid_of_socketpair():
    a, b = socket.socketpair()
    assert peer_uid(a) == os.getuid()
    a.close()
    b.close()


def _server(handlers, transport="unix", **opts):
    d = short_tmpdir()
    srv = Server(transport, os.path.join(d, "x.sock") if transport == "unix" else None,
                 handlers, {"protocol": 1, "agent": "t", "pid": os.getpid()},
                 Options(**opts))
    srv.open()
    srv.start()
    return srv


def test_handler_exception_is_internal_error_and_loop_survives():
    def boom(params):
        raise RuntimeError("kaput")
    srv = _server({"report": (boom, False), "gc": (boom, True)})
    try:
        c = Client(srv.address)
        err = c.call("report")["error"]
        assert err["code"] == "internal" and "kaput" in err["message"]
        assert c.call("gc")["error"]["code"] == "failed"
        assert c.call("ping")["result"] == {"pong": True}
        assert srv.thread.is_alive()
    finally:
        srv.stop()


def test_busy_while_an_action_runs():
    def slow(params):
        time.sleep(0.5)
        return {"ok": 1}
    srv = _server({"gc": (slow, True)})
    try:
        a, b = Client(srv.address), Client(srv.address)
        a.send_raw(protocol.encode(protocol.request(1, "gc")))
        time.sleep(0.1)
        assert b.call("gc")["error"]["code"] == "busy"
        assert b.call("ping")["result"] == {"pong": True}  # served meanwhile
        assert a.recv() == {"id": 1, "result": {"ok": 1}}
    finally:
        srv.stop()


def test_tcp_transport_hmac_challenge():
    srv = _server({}, transport="tcp")
    try:
        assert srv.address.startswith("127.0.0.1:")
        bad = Client(srv.address)
        assert bad.call("ping")["error"]["code"] == "unauthorized"
        assert bad.closed_by_peer()
        good = Client(srv.address)
        challenge = good.hello["hello"]["auth"]["challenge"]
        ok = good.call("auth", {"hmac": protocol.auth_hmac(srv.token, challenge)})
        assert ok["result"] == {"authenticated": True}
        assert good.call("ping")["result"] == {"pong": True}
        wrong = Client(srv.address)
        assert wrong.call("auth", {"hmac": "00" * 32})["error"]["code"] == "unauthorized"
        assert wrong.closed_by_peer()
    finally:
        srv.stop()


def _ensure_test_user():
    try:
        return pwd.getpwnam("vrams-test").pw_uid
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        return None
    r = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", "vrams-test"],
                       capture_output=True)
    if r.returncode != 0:
        return None
    return pwd.getpwnam("vrams-test").pw_uid


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch uid")
def test_real_other_uid_is_refused():
    uid = _ensure_test_user()
    if uid is None:
        pytest.skip("cannot create a test user")
    srv = _server({})
    d = os.path.dirname(srv.address)
    try:
        # dedicated dir: make it traversable and the socket connectable so only
        # the peer-credential check stands between the other uid and the agent
        os.chmod(d, 0o711)
        os.chmod(srv.address, 0o666)
        code = ("import socket,sys,os\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(5)\n"
                "s.connect(sys.argv[1])\nprint(os.getuid(), repr(s.recv(100)))")
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        r = subprocess.run([py, "-c", code, srv.address],
                           user=uid, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [str(uid), "b''"]  # connected, then closed: no hello
        c = Client(srv.address)  # our own uid still works
        assert c.call("ping")["result"] == {"pong": True}
    finally:
        srv.stop()


FUZZ_CHILD = r'''
import json, os, sys, time
sys.path.insert(0, sys.argv[3])
if sys.argv[2] == "1":
    import vram_steward_agent
    assert vram_steward_agent.start(runtime_dir=sys.argv[4], partial_timeout=0.3, tick_interval=0.05)
    print("READY", flush=True)
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(m.parameters(), lr=0.01)
x = torch.randn(32, 8); y = x.sum(1, keepdim=True)
losses = []
stop = sys.argv[1]
while len(losses) < 50 or (sys.argv[2] == "1" and not os.path.exists(stop) and len(losses) < 100000):
    loss = ((m(x) - y) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
    if sys.argv[2] == "1":
        time.sleep(0.02)
print("LOSSES " + json.dumps(losses[:50]), flush=True)
'''


@pytest.fixture(scope="module")
def fuzz_child():
    rt = short_tmpdir()
    stop = os.path.join(rt, "stop")
    proc = subprocess.Popen([PYTHON, "-c", FUZZ_CHILD, stop, "1", BOOTSTRAP, rt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_line(proc, "READY")
    with open(os.path.join(rt, "agents", "%d.json" % proc.pid)) as f:
        entry = json.load(f)
    yield {"proc": proc, "entry": entry, "stop": stop}
    open(stop, "w").close()
    if proc.poll() is None:
        proc.kill()


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.floats(allow_nan=False, allow_infinity=False)
json_any = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=10)
requests = st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.integers(), st.text(max_size=70), json_any),
    "method": st.one_of(st.sampled_from(sorted(protocol.METHODS) + ["x", ""]), json_any),
    "params": st.one_of(st.dictionaries(st.sampled_from(["models", "events", "hmac", "z"]),
                                        json_any, max_size=3), json_any)})
frames = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda n, b: struct.pack(">I", n) + b, st.integers(0, 2**32 - 1), st.binary(max_size=64)),
    requests.map(lambda r: protocol.encode(r)),
    st.lists(requests, min_size=1, max_size=4).map(lambda rs: b"".join(protocol.encode(r) for r in rs)),
    st.binary(max_size=40).map(lambda b: struct.pack(">I", len(b) or 1) + (b or b"x")),
)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(frames, min_size=1, max_size=3))
def test_fuzz_live_agent(fuzz_child, chunks):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(fuzz_child["entry"]["address"])
    try:
        try:
            for chunk in chunks:
                s.sendall(chunk)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent closed on a bad frame: fine
        dec = protocol.FrameDecoder()
        got = []
        while True:
            try:
                data = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not data:
                break
            got.extend(dec.feed(data))  # replies are always valid frames
        assert got and "hello" in got[0]
        for msg in got[1:]:
            assert ("result" in msg or "error" in msg) and "id" in msg
    finally:
        s.close()


def test_fuzzed_child_still_answers_and_trains_identically(fuzz_child):
    c = Client(fuzz_child["entry"]["address"])
    assert c.call("ping")["result"] == {"pong": True}
    # The child announces READY before it imports torch; give it time to build its model.
    deadline = time.monotonic() + 60
    rep = c.call("report")["result"]
    while not rep["models"] and time.monotonic() < deadline:
        time.sleep(0.1)
        rep = c.call("report")["result"]
    assert [m["class"] for m in rep["models"]] == ["torch.nn.modules.container.Sequential"]
    c.close()
    open(fuzz_child["stop"], "w").close()
    proc = fuzz_child["proc"]
    with_agent = json.loads(wait_line(proc, "LOSSES "))
    ref = subprocess.run([PYTHON, "-c", FUZZ_CHILD, "-", "0", BOOTSTRAP, "-"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, VRAM_STEWARD_AGENT="0"))
    without = json.loads(ref.stdout.split("LOSSES ", 1)[1])
    assert with_agent == without
