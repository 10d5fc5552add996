"""A storm of same-user requests is paced: each client process gets a burst,
then one request per interval, answered late rather than refused; a refusal of
an action comes a quarter of a second late, so a client retrying in a loop
waits between tries."""

from __future__ import annotations

import os
import threading
import time

from app.agent import protocol
from app.agent.errors import ActionError
from app.agent.server import Options, Server, pacing

from .conftest import Client, short_tmpdir


def _server(handlers: dict, **opts) -> Server:
    d = short_tmpdir()
    srv = Server("unix", os.path.join(d, "x.sock"), handlers,
                 {"protocol": 1, "agent": "t", "pid": os.getpid()}, Options(**opts))
    srv.open()
    srv.start()
    return srv


def test_the_cell_rate_gives_a_burst_then_one_per_interval():
    pacer = pacing.Pacer(burst=3, interval_s=0.1)
    starts = [pacer.slot("pid", 10.0) for _ in range(6)]
    assert starts[:3] == [10.0, 10.0, 10.0]
    assert [round(s - 10.0, 3) for s in starts[3:]] == [0.1, 0.2, 0.3]
    assert pacer.slot("other", 10.0) == 10.0  # each client has its own
    assert pacer.slot("pid", 11.0) == 11.0  # quiet for long enough: at once again
    assert pacing.Pacer(burst=3, interval_s=0.0).slot("pid", 5.0) == 5.0


def test_a_client_flooding_requests_is_answered_at_the_pace_never_refused():
    calls: list = []
    srv = _server({"report": (lambda p: calls.append(time.monotonic()) or {"n": len(calls)},
                              False)}, pace_burst=5, pace_interval=0.05)
    try:
        c = Client(srv.address)
        t0 = time.monotonic()
        for i in range(15):
            c.sock.sendall(protocol.encode(protocol.request(i + 1, "report", {})))
        replies = [c.recv() for _ in range(15)]
        took = time.monotonic() - t0
        assert all("result" in r for r in replies)  # every one answered
        assert sorted(r["id"] for r in replies) == list(range(1, 16))
        assert 0.45 <= took < 3.0, took  # 10 beyond the burst, 50 ms apart
        pong = c.call("ping")  # not paced
        assert pong["result"] == {"pong": True}
    finally:
        srv.stop()


def test_a_busy_or_refused_action_is_answered_late():
    release = threading.Event()

    def slow(params):
        release.wait(5)
        return {"ok": True}

    def refuse(params):
        raise ActionError(protocol.REFUSED, "no")

    srv = _server({"unload": (slow, True), "reload": (refuse, True)})
    try:
        first, second = Client(srv.address), Client(srv.address)
        first.sock.sendall(protocol.encode(protocol.request(1, "unload", {"model": "m1"})))
        time.sleep(0.1)
        t0 = time.monotonic()
        busy = second.call("unload", {"model": "m1"})
        assert busy["error"]["code"] == "busy"
        assert time.monotonic() - t0 >= pacing.REFUSAL_DELAY_S - 0.01
        release.set()
        assert first.recv()["result"] == {"ok": True}
        t0 = time.monotonic()
        refused = second.call("reload", {"model": "m1"})
        assert refused["error"]["code"] == "refused"
        assert time.monotonic() - t0 >= pacing.REFUSAL_DELAY_S - 0.01
    finally:
        release.set()
        srv.stop()


def test_a_client_that_never_reads_its_answers_is_closed_not_queued_forever():
    srv = _server({"report": (lambda p: {}, False)}, pace_burst=1, pace_interval=10.0)
    try:
        c = Client(srv.address)
        for i in range(pacing.MAX_WAITING + 5):
            c.sock.sendall(protocol.encode(protocol.request(i + 1, "report", {})))
        deadline = time.monotonic() + 5
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                c.recv()
            except (EOFError, ConnectionResetError):
                closed = True
        assert closed
        assert Client(srv.address).call("ping")["result"] == {"pong": True}
    finally:
        srv.stop()


def test_a_late_refusal_never_makes_a_running_request_evictable():
    """A connection with a recording running is not evicted to make room,
    even after one of its other requests got a (late) busy answer."""
    recording, unloading = threading.Event(), threading.Event()

    def record(params):
        recording.wait(5)
        return {"recorded": True}

    def unload(params):
        unloading.wait(5)
        return {"ok": True}

    srv = _server({"record": (record, "record"), "unload": (unload, True)}, max_connections=2)
    try:
        a, b = Client(srv.address), Client(srv.address)
        a.sock.sendall(protocol.encode(protocol.request(1, "record", {})))
        b.sock.sendall(protocol.encode(protocol.request(1, "unload", {"model": "m1"})))
        time.sleep(0.1)
        assert a.call("unload", {"model": "m2"})["error"]["code"] == "busy"
        try:
            Client(srv.address, timeout=1.0).call("ping")  # a third: no room, none evictable
        except (EOFError, OSError):
            pass
        recording.set()
        unloading.set()
        assert a.recv() == {"id": 1, "result": {"recorded": True}}
    finally:
        recording.set()
        unloading.set()
        srv.stop()
