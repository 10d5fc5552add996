"""One connection to an agent, against a fake agent speaking
``app.agent.protocol`` over real sockets (and raw servers sending garbage)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.agent import protocol
from app.core.agents import client as agent_client
from app.core.agents.connection import (
    MAX_PENDING_TIMEOUTS,
    AgentConnection,
    AgentError,
    AgentIncompatible,
    AgentTimeout,
    AgentUnavailable,
)
from app.core.agents.types import AgentEntry
from tests.fakes.fake_agent import FakeAgent

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


def test_request_ids_increase_and_params_arrive(agent):
    with AgentConnection(agent.entry(), 2.0) as conn:
        conn.call("report", {"models": True})
    assert ("report", {"models": True}) in agent.requests


def test_error_reply_is_a_typed_error_and_connection_stays_usable(agent):
    with AgentConnection(agent.entry(), 2.0) as conn:
        with pytest.raises(AgentError) as info:
            conn.call("fail")
        assert info.value.code == "failed" and info.value.message == "it broke"
        with pytest.raises(AgentError) as info:
            conn.call("nonsense")
        assert info.value.code == "unknown_method"
        assert conn.call("ping") == {"pong": True}


def test_events_are_queued_not_mistaken_for_replies(agent):
    agent.events_before_reply = 3
    with AgentConnection(agent.entry(), 2.0) as conn:
        assert conn.call("ping") == {"pong": True}
        events = conn.events()
        assert [e["event"] for e in events] == ["oom"] * 3
        assert conn.events() == []


def test_hung_agent_times_out_within_the_timeout(agent):
    agent.hang = True
    with AgentConnection(agent.entry(), 2.0) as conn:
        started = time.monotonic()
        with pytest.raises(AgentTimeout):
            conn.call("ping", timeout_s=0.2)
        assert time.monotonic() - started < 0.6
        assert not conn.closed  # a timeout alone keeps the connection
        for _ in range(MAX_PENDING_TIMEOUTS - 1):
            with pytest.raises(AgentTimeout):
                conn.call("ping", timeout_s=0.05)
        assert conn.closed  # ... but a hung agent's connection is dropped eventually


def test_agent_that_never_says_hello_times_out(agent):
    agent.hang_hello = True
    started = time.monotonic()
    with pytest.raises(AgentUnavailable):
        AgentConnection(agent.entry(), 0.2)
    assert time.monotonic() - started < 0.6
    result = agent_client.free_cache(agent.entry(), 0.3)
    assert not result.ok and "timed out" in result.error


def test_late_reply_after_a_timeout_is_skipped(agent):
    agent.delay_s = 0.3
    with AgentConnection(agent.entry(), 2.0) as conn:
        with pytest.raises(AgentTimeout):
            conn.call("report", timeout_s=0.1)
        agent.delay_s = 0.0
        assert conn.call("ping", timeout_s=2.0) == {"pong": True}


def test_malformed_frame_closes_the_connection(agent):
    agent.garbage = True
    with AgentConnection(agent.entry(), 2.0) as conn:
        with pytest.raises(AgentUnavailable, match="malformed"):
            conn.call("ping")
        assert conn.closed
        with pytest.raises(AgentUnavailable):
            conn.call("ping")


def test_non_object_result_is_rejected(agent):
    agent.bad_result = True
    with pytest.raises(AgentUnavailable, match="malformed"):
        agent_client.query_report(agent.entry(), 2.0)


def test_newer_protocol_major_gives_a_clear_error(agent):
    agent.protocol_version = 2
    with pytest.raises(AgentIncompatible, match="protocol 2.*update"):
        AgentConnection(agent.entry(), 2.0)
    agent.protocol_version = "1.4"  # same major: fine
    with AgentConnection(agent.entry(), 2.0) as conn:
        assert conn.call("ping") == {"pong": True}


def test_nothing_listening_is_unavailable(runtime):
    entry = AgentEntry(pid=os.getpid(), create_time=None,
                       address=os.path.join(runtime, "nobody.sock"), transport="unix")
    with pytest.raises(AgentUnavailable, match="cannot connect"):
        AgentConnection(entry, 0.5)
    with pytest.raises(AgentUnavailable):
        agent_client.query_report(entry, 0.5)


def test_peer_closing_mid_call_is_unavailable(agent):
    with AgentConnection(agent.entry(), 2.0) as conn:
        conn.call("ping")
        agent.close()
        with pytest.raises(AgentUnavailable):
            conn.call("ping", timeout_s=1.0)


# ------------------------------------------------------------------- tcp


def test_tcp_agent_with_hmac_challenge():
    fake = FakeAgent(transport="tcp")
    try:
        entry = fake.entry()
        with AgentConnection(entry, 2.0) as conn:
            assert conn.call("ping") == {"pong": True}
        assert fake.requests[0][0] == "auth"
        wrong = AgentEntry(**{**{f: getattr(entry, f) for f in entry.__slots__},
                              "token": "0" * 32})
        with pytest.raises(AgentUnavailable, match="unauthorized"):
            AgentConnection(wrong, 2.0)
        no_token = AgentEntry(pid=entry.pid, create_time=None, address=entry.address,
                              transport="tcp")
        with pytest.raises(AgentUnavailable, match="no token"):
            AgentConnection(no_token, 2.0)
    finally:
        fake.close()



# ------------------------------------------------------------- fuzzing



class RawServer:
    """Sends a hello, then ``payload`` bytes in reply to anything, then hangs."""

    def __init__(self, folder: str, payload: bytes) -> None:
        import threading

        self.path = os.path.join(folder, f"raw-{time.monotonic_ns()}.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(1)
        self.payload = payload
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        try:
            conn.sendall(protocol.encode({"hello": {"protocol": 1, "pid": 1, "auth": None}}))
            conn.recv(65536)
            conn.sendall(self.payload)
            conn.recv(65536)  # until the client closes
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        os.unlink(self.path)


frames = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda body: protocol.HEADER.pack(len(body)) + body, st.binary(min_size=1, max_size=64)),
    st.builds(lambda obj: protocol.HEADER.pack(len(obj)) + obj,
              st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(
                               st.sampled_from(["id", "result", "error", "event", "x"]), c,
                               max_size=3)).map(lambda v: json.dumps(v).encode())),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=frames)
def test_garbage_replies_give_typed_errors_within_the_timeout(runtime, payload):
    server = RawServer(runtime, payload)
    entry = AgentEntry(pid=os.getpid(), create_time=None, address=server.path, transport="unix")
    try:
        started = time.monotonic()
        with AgentConnection(entry, 1.0) as conn:
            try:
                result = conn.call("ping", timeout_s=0.2)
            except (AgentUnavailable, AgentError):
                pass
            else:  # only a well-formed reply with our id gets through
                assert isinstance(result, dict)
        assert time.monotonic() - started < 1.0
    finally:
        server.close()


def test_connect_waits_out_a_full_listen_backlog(tmp_path):
    """Another client's burst can fill an agent's AF_UNIX backlog, which fails
    a connect at once; the client tries again until its deadline."""
    import threading

    from app.agent import protocol

    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    fillers = []
    while True:  # fill the backlog
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            break
        fillers.append(s)
    served = []

    def drain_later():
        time.sleep(0.2)
        for _ in range(len(fillers) + 1):
            conn, _ = listener.accept()
            conn.sendall(protocol.encode({"hello": {"protocol": protocol.PROTOCOL_VERSION,
                                                    "pid": os.getpid(), "auth": None}}))
            served.append(conn)

    t = threading.Thread(target=drain_later)
    t.start()
    entry = AgentEntry(pid=os.getpid(), create_time=None, address=path, transport="unix")
    t0 = time.monotonic()
    conn = AgentConnection(entry, 3.0)  # connects
    assert conn.hello["pid"] == os.getpid() and time.monotonic() - t0 >= 0.15
    conn.close()
    t.join(5)
    for s in fillers + served:
        s.close()
    listener.close()



# -- the peer check: our uid, the entry's pid, before anything is sent -------------------


def test_a_socket_served_by_another_process_than_the_entry_names_is_refused(agent, runtime):
    """An entry naming process A, whose socket process B (ours too) serves:
    refused before a byte is sent, whatever the call."""
    other = FakeAgent(sock_dir=runtime, own_process=True)
    try:
        entry = AgentEntry.from_json({**agent.entry_json(), "pid": other.pid})
        assert entry is not None
        with pytest.raises(AgentUnavailable, match=f"served by process {agent.pid}, "
                                                   f"not {other.pid}: refused"):
            AgentConnection(entry, 2.0)
        assert not agent_client.free_cache(entry, 2.0).ok
        assert not agent_client.unload(entry, "m1", "cpu", False, "manual", 2.0).ok
        assert agent.requests == []
    finally:
        other.close()


def test_a_socket_served_by_another_user_is_refused(runtime):
    from tests.fakes.neighbour import FakeNeighbourAgent, as_neighbour, neighbour, sticky_tmpdir

    uid, gid = neighbour()
    tmp = sticky_tmpdir()
    sockets = os.path.join(tmp, "theirs")
    as_neighbour(lambda: os.mkdir(sockets, 0o755), uid, gid)
    fake = FakeNeighbourAgent(uid, gid, None, sockets, os.path.join(tmp, "log"))
    try:
        entry = AgentEntry.from_json(fake.entry_json)
        assert entry is not None
        with pytest.raises(AgentUnavailable, match=f"served by uid {uid}, not you: refused"):
            AgentConnection(entry, 2.0)
        assert not agent_client.record(entry, 1.0).ok
        assert fake.requests() == []
    finally:
        fake.close()
        shutil.rmtree(tmp, ignore_errors=True)
