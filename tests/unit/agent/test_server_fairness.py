"""A same-user client hoarding connections never locks the app out of an agent.

The hostile client is a separate process (``HOSTILE``) that opens 200
connections at once, keeps every one the agent leaves open idle, pinging or
dripping a partial frame, and leaks one more connection every 100 ms so the
agent's table stays full.  Meanwhile the app's real client must get a whole
report within 1 s, every time.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from app.agent import protocol
from app.agent.server import Options, Server
from app.core.agents import client as agent_client
from app.core.agents.connection import AgentConnection
from app.core.agents.types import AgentEntry

from .conftest import PYTHON, REPO, Client, short_tmpdir

FLOOD = 200
BOUND_S = 1.0  # the bound: the app reaches every agent within 1 s
MODES = ["idle", "ping", "partial"]

HOSTILE = r'''
import json, os, resource, selectors, socket, struct, sys, time

address, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = 4 * count + 256
if soft != resource.RLIM_INFINITY and soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))

def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body

PING = frame({"id": 1, "method": "ping", "params": {}})
PARTIAL = struct.pack(">I", 100) + b'{"id"'
sel = selectors.DefaultSelector()
socks = set()

def drop(s):
    sel.unregister(s)
    socks.discard(s)
    s.close()

def send(s, data):
    try:
        s.send(data)
    except BlockingIOError:
        pass
    except OSError:
        drop(s)

def connect():
    if address.startswith("127.0.0.1:"):
        s = socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), timeout=10)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        while True:
            try:
                s.connect(address)
                break
            except BlockingIOError:  # the listen backlog is full: try again
                time.sleep(0.001)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
    socks.add(s)
    if mode == "partial":
        send(s, PARTIAL)

for _ in range(count):
    connect()
sel.register(sys.stdin, selectors.EVENT_READ, "control")
print("HELD %d" % count, flush=True)
now = time.monotonic()
next_ping, next_drip, next_leak, give_up = now, now + 0.5, now + 0.1, now + 300
while time.monotonic() < give_up:
    for key, _ in sel.select(0.01):
        if key.data == "control":
            if not sys.stdin.readline():
                sys.exit(0)
            print("OPEN %d" % len(socks), flush=True)
            continue
        s = key.fileobj
        try:
            data = s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            drop(s)
    now = time.monotonic()
    if mode == "ping" and now >= next_ping:
        next_ping = now + 0.05
        for s in list(socks):
            send(s, PING)
    if mode == "partial" and now >= next_drip:
        next_drip = now + 0.5
        for s in list(socks):
            send(s, b" ")
    if now >= next_leak:
        next_leak = now + 0.1
        try:
            connect()
        except OSError:
            pass
'''


class Hostile:
    """The hoarding client's process: ``open_count`` asks how many of its
    connections the agent has not closed."""

    def __init__(self, address: str, mode: str, count: int = FLOOD) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_STEWARD")}
        self.proc = subprocess.Popen([PYTHON, "-c", HOSTILE, address, str(count), mode],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("HELD"):
            self.proc.kill()
            raise AssertionError("hostile client failed: %r %s" % (line, self.proc.stderr.read()))

    def open_count(self) -> int:
        self.proc.stdin.write("status\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def hostile(address: str, mode: str, count: int = FLOOD) -> Iterator[Hostile]:
    h = Hostile(address, mode, count)
    try:
        time.sleep(0.3)  # let the agent take in the whole burst first
        yield h
    finally:
        h.close()


def _report(params: dict) -> dict:
    return {"pid": os.getpid(), "argv": ["fairness"], "models": [], "devices": []}


@contextlib.contextmanager
def server(transport: str = "unix", handlers: dict | None = None,
           **opts: float) -> Iterator[Server]:
    d = short_tmpdir()
    srv = Server(transport, os.path.join(d, "a.sock") if transport == "unix" else None,
                 handlers or {"report": (_report, False)},
                 {"protocol": 1, "agent": "t", "pid": os.getpid()}, Options(**opts))
    srv.open()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def entry_of(srv: Server) -> AgentEntry:
    return AgentEntry(pid=os.getpid(), create_time=None, address=srv.address,
                      transport=srv.transport, token=srv.token)


def timed_reports(entry: AgentEntry, times: int = 5) -> float:
    """The worst of ``times`` consecutive ``query_report`` round trips
    (connect, hello, auth where asked, report), each checked to be whole."""
    worst = 0.0
    for _ in range(times):
        t0 = time.perf_counter()
        report = agent_client.query_report(entry, timeout_s=5.0)
        elapsed = time.perf_counter() - t0
        assert report.pid == entry.pid
        worst = max(worst, elapsed)
        time.sleep(0.15)  # the hostile leaks a connection or two meanwhile
    print("worst report latency %.1f ms" % (worst * 1000))
    return worst


def wait_open_at_most(h: Hostile, limit: int) -> int:
    deadline = time.monotonic() + 10
    n = h.open_count()
    while n > limit and time.monotonic() < deadline:
        time.sleep(0.05)
        n = h.open_count()
    return n


@pytest.mark.parametrize("mode", MODES)
def test_app_reaches_agent_while_200_connections_are_held(mode):
    with server() as srv, hostile(srv.address, mode) as h:
        assert timed_reports(entry_of(srv)) < BOUND_S
        assert 0 < wait_open_at_most(h, srv.options.max_connections) \
            <= srv.options.max_connections  # the agent stays bounded, the hoarder keeps some


@pytest.mark.parametrize("mode", MODES)
def test_subscription_from_before_the_flood_keeps_receiving_events(mode):
    with server() as srv:
        sub = AgentConnection(entry_of(srv), timeout_s=5.0)
        try:
            assert sub.call("subscribe", {"events": ["oom"]}) == {"events": ["oom"]}
            with hostile(srv.address, mode):
                assert timed_reports(entry_of(srv), times=2) < BOUND_S
                srv.emit("oom", {"device": 0, "alloc": 1})
                assert _next_event(sub) == {"event": "oom", "data": {"device": 0, "alloc": 1}}
                assert sub.call("ping") == {"pong": True}
        finally:
            sub.close()


def _next_event(conn: AgentConnection, timeout: float = 5.0) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conn.call("ping")
        events = conn.events()
        if events:
            return events[0]
        time.sleep(0.02)
    return None


@pytest.mark.parametrize("mode", MODES)
def test_app_reaches_a_real_agent_process_while_flooded(training_child, mode):
    entry = AgentEntry.from_json(training_child["entry"])
    assert entry is not None
    with hostile(entry.address, mode):
        assert timed_reports(entry) < BOUND_S
    assert training_child["proc"].poll() is None  # the host kept running


@pytest.mark.parametrize("mode", ["idle", "partial"])
def test_unauthenticated_tcp_flood_keeps_no_authenticated_client_out(mode):
    with server("tcp") as srv:
        entry = entry_of(srv)
        kept = AgentConnection(entry, timeout_s=5.0)
        try:
            assert kept.call("ping") == {"pong": True}
            with hostile(srv.address, mode):
                assert timed_reports(entry) < BOUND_S
                assert kept.call("ping") == {"pong": True}  # never evicted for them
        finally:
            kept.close()


def blocking_action(started: threading.Event, release: threading.Event, result: dict):
    """A worker-thread handler that runs until ``release`` is set."""
    def action(params: dict) -> dict:
        started.set()
        release.wait(30)
        return result
    return action


def test_connection_with_an_action_on_the_worker_is_never_evicted():
    started, release = threading.Event(), threading.Event()
    gc = blocking_action(started, release, {"collected": 0, "seconds": 0.0})
    with server(handlers={"gc": (gc, True), "report": (_report, False)},
                max_connections=3) as srv:
        worker = Client(srv.address)
        worker.send_raw(protocol.encode(protocol.request(7, "gc")))
        assert started.wait(10)
        with hostile(srv.address, "idle", count=50):
            assert timed_reports(entry_of(srv), times=2) < BOUND_S
        release.set()
        assert worker.recv() == {"id": 7, "result": {"collected": 0, "seconds": 0.0}}
        assert worker.call("ping")["result"] == {"pong": True}
        worker.close()


def test_new_connection_is_refused_when_only_a_running_action_holds_the_table():
    started, release = threading.Event(), threading.Event()
    with server(handlers={"gc": (blocking_action(started, release, {}), True)},
                max_connections=1) as srv:
        worker = Client(srv.address)
        worker.send_raw(protocol.encode(protocol.request(1, "gc")))
        assert started.wait(10)
        extra = socket.socket(socket.AF_UNIX)
        extra.settimeout(5)
        extra.connect(srv.address)
        assert extra.recv(100) == b""  # closed without a hello
        extra.close()
        release.set()
        assert worker.recv() == {"id": 1, "result": {}}
        worker.close()


def test_fresh_connection_gets_to_send_its_first_request():
    with server(max_connections=4, grace_period=30) as srv:
        a, b, c = (Client(srv.address) for _ in range(3))
        fresh = Client(srv.address)  # accepted before the others' latest requests
        for client in (a, b, c):
            assert client.call("ping")["result"] == {"pong": True}
        newcomer = Client(srv.address)
        assert a.recv()["error"]["code"] == "busy"  # the least recently active went
        assert a.closed_by_peer()
        for client in (fresh, b, c, newcomer):
            assert client.call("ping")["result"] == {"pong": True}
            client.close()


def test_subscriber_cap_evicts_the_oldest_subscriber():
    with server(max_subscribers=2) as srv:
        first, second, third = (Client(srv.address) for _ in range(3))
        for client in (first, second, third):
            assert client.call("subscribe", {"events": ["oom"]})["result"] == {"events": ["oom"]}
        closed = first.recv()
        assert closed["error"]["code"] == "busy" and "subscriber" in closed["error"]["message"]
        assert first.closed_by_peer()
        srv.emit("oom", {"n": 1})
        for client in (second, third):
            assert client.recv() == {"event": "oom", "data": {"n": 1}}
            assert client.call("subscribe", {"events": ["oom"]})["result"]  # no eviction
            client.close()


def test_subscribers_go_last_when_the_table_is_full():
    with server(max_connections=3) as srv:
        sub = Client(srv.address)
        assert sub.call("subscribe", {"events": ["oom"]})["result"] == {"events": ["oom"]}
        idle = [Client(srv.address) for _ in range(2)]
        for client in idle:
            client.call("ping")
        newcomers = [Client(srv.address) for _ in range(4)]
        srv.emit("oom", {"n": 2})
        assert sub.recv() == {"event": "oom", "data": {"n": 2}}
        assert all(client.closed_by_peer() for client in idle)
        for client in newcomers + [sub]:
            client.close()


FD_CHILD = r'''
import os, resource, sys
sys.path.insert(0, sys.argv[1])
from app.agent.server import Options, Server
_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
srv = Server("unix", sys.argv[2], {}, {"protocol": 1, "agent": "t", "pid": os.getpid()},
             Options(tick_interval=0.05))
srv.open()
srv.start()
hog = []
try:
    while True:
        hog.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
print("HOGGED", flush=True)
sys.stdin.readline()
for fd in hog:
    os.close(fd)
print("RELEASED", flush=True)
sys.stdin.readline()
'''


def test_agent_out_of_fds_accepts_again_once_fds_are_free():
    path = os.path.join(short_tmpdir(), "a.sock")
    proc = subprocess.Popen([PYTHON, "-c", FD_CHILD, REPO, path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "HOGGED"
        waiting = socket.socket(socket.AF_UNIX)
        waiting.settimeout(10)
        waiting.connect(path)  # queued: the agent cannot accept it yet
        time.sleep(0.3)
        proc.stdin.write("release\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "RELEASED"
        decoder = protocol.FrameDecoder()
        hello = next(iter(decoder.feed(waiting.recv(65536))))
        assert hello["hello"]["pid"] == proc.pid
        waiting.sendall(protocol.encode(protocol.request(1, "ping")))
        assert next(iter(decoder.feed(waiting.recv(65536)))) == {"id": 1, "result": {"pong": True}}
        waiting.close()
    finally:
        proc.stdin.close()
        proc.wait(10)
