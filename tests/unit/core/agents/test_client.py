"""The agent client: registry reading/pruning and one connection, against a
fake agent speaking ``app.agent.protocol`` over real sockets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from app.core.agents import client as agent_client
from app.core.agents.client import (
    AgentConnection,
    AgentError,
    AgentIncompatible,
    AgentTimeout,
    AgentUnavailable,
    read_registry,
)
from app.core.agents.types import AgentEntry
from tests.fakes.fake_agent import FakeAgent

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


@pytest.fixture
def agent(runtime):
    fake = FakeAgent(sock_dir=runtime)
    yield fake
    fake.close()


def entry_of(fake: FakeAgent) -> AgentEntry:
    entry = AgentEntry.from_json(fake.entry_json())
    assert entry is not None
    return entry


def test_runtime_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_STEWARD_RUNTIME_DIR", str(tmp_path))
    assert agent_client.runtime_dir() == str(tmp_path)
    monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR")
    if os.name != "nt":
        assert agent_client.runtime_dir() == os.path.join(
            tempfile.gettempdir(), f"vram-steward-{os.getuid()}")


# ------------------------------------------------------------------ calls


def test_ping_report_free_cache_and_gc(agent):
    entry = entry_of(agent)
    with AgentConnection(entry, 2.0) as conn:
        assert conn.hello["pid"] == agent.pid
        assert conn.call("ping") == {"pong": True}
        assert conn.call("ping") == {"pong": True}  # several calls on one connection
    report = agent_client.query_report(entry, 2.0)
    assert report.pid == agent.pid
    assert report.devices[0].allocated == 1000 and report.devices[0].reserved == 4000
    assert report.models[0].param_bytes == 40
    assert report.round_trip_s is not None and report.received_at > 0
    result = agent_client.free_cache(entry, 2.0)
    assert result.ok and result.reserved_before == 4000 and result.reserved_after == 1000
    assert result.freed == 3000
    gc = agent_client.collect_garbage(entry, 2.0)
    assert gc == {"ok": True, "collected": 7, "seconds": 0.001, "error": None}


def test_request_ids_increase_and_params_arrive(agent):
    with AgentConnection(entry_of(agent), 2.0) as conn:
        conn.call("report", {"models": True})
    assert ("report", {"models": True}) in agent.requests


def test_error_reply_is_a_typed_error_and_connection_stays_usable(agent):
    with AgentConnection(entry_of(agent), 2.0) as conn:
        with pytest.raises(AgentError) as info:
            conn.call("fail")
        assert info.value.code == "failed" and info.value.message == "it broke"
        with pytest.raises(AgentError) as info:
            conn.call("nonsense")
        assert info.value.code == "unknown_method"
        assert conn.call("ping") == {"pong": True}


def test_events_are_queued_not_mistaken_for_replies(agent):
    agent.events_before_reply = 3
    with AgentConnection(entry_of(agent), 2.0) as conn:
        assert conn.call("ping") == {"pong": True}
        events = conn.events()
        assert [e["event"] for e in events] == ["oom"] * 3
        assert conn.events() == []


def test_hung_agent_times_out_within_the_timeout(agent):
    agent.hang = True
    with AgentConnection(entry_of(agent), 2.0) as conn:
        started = time.monotonic()
        with pytest.raises(AgentTimeout):
            conn.call("ping", timeout_s=0.2)
        assert time.monotonic() - started < 0.6
        assert not conn.closed  # a timeout alone keeps the connection
        for _ in range(agent_client.MAX_PENDING_TIMEOUTS - 1):
            with pytest.raises(AgentTimeout):
                conn.call("ping", timeout_s=0.05)
        assert conn.closed  # ... but a hung agent's connection is dropped eventually


def test_agent_that_never_says_hello_times_out(agent):
    agent.hang_hello = True
    started = time.monotonic()
    with pytest.raises(AgentUnavailable):
        AgentConnection(entry_of(agent), 0.2)
    assert time.monotonic() - started < 0.6
    result = agent_client.free_cache(entry_of(agent), 0.3)
    assert not result.ok and "timed out" in result.error


def test_late_reply_after_a_timeout_is_skipped(agent):
    agent.delay_s = 0.3
    with AgentConnection(entry_of(agent), 2.0) as conn:
        with pytest.raises(AgentTimeout):
            conn.call("report", timeout_s=0.1)
        agent.delay_s = 0.0
        assert conn.call("ping", timeout_s=2.0) == {"pong": True}


def test_malformed_frame_closes_the_connection(agent):
    agent.garbage = True
    with AgentConnection(entry_of(agent), 2.0) as conn:
        with pytest.raises(AgentUnavailable, match="malformed"):
            conn.call("ping")
        assert conn.closed
        with pytest.raises(AgentUnavailable):
            conn.call("ping")


def test_non_object_result_is_rejected(agent):
    agent.bad_result = True
    with pytest.raises(AgentUnavailable, match="malformed"):
        agent_client.query_report(entry_of(agent), 2.0)


def test_newer_protocol_major_gives_a_clear_error(agent):
    agent.protocol_version = 2
    with pytest.raises(AgentIncompatible, match="protocol 2.*update"):
        AgentConnection(entry_of(agent), 2.0)
    agent.protocol_version = "1.4"  # same major: fine
    with AgentConnection(entry_of(agent), 2.0) as conn:
        assert conn.call("ping") == {"pong": True}


def test_nothing_listening_is_unavailable(runtime):
    entry = AgentEntry(pid=os.getpid(), create_time=None,
                       address=os.path.join(runtime, "nobody.sock"), transport="unix")
    with pytest.raises(AgentUnavailable, match="cannot connect"):
        AgentConnection(entry, 0.5)
    with pytest.raises(AgentUnavailable):
        agent_client.query_report(entry, 0.5)


def test_peer_closing_mid_call_is_unavailable(agent):
    with AgentConnection(entry_of(agent), 2.0) as conn:
        conn.call("ping")
        agent.close()
        with pytest.raises(AgentUnavailable):
            conn.call("ping", timeout_s=1.0)


# ------------------------------------------------------------------- tcp


def test_tcp_agent_with_hmac_challenge():
    fake = FakeAgent(transport="tcp")
    try:
        entry = entry_of(fake)
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


# --------------------------------------------------------------- registry


def test_registry_lists_live_agents_and_skips_malformed_files(agent, runtime):
    path = agent.register(runtime)
    folder = os.path.dirname(path)
    for name, text in [("bad.json", "{not json"), ("list.json", "[1, 2]"),
                       ("nopid.json", json.dumps({"address": "x", "transport": "unix"})),
                       ("huge.json", "{" + " " * 100_000 + "}"), ("notes.txt", "hello")]:
        with open(os.path.join(folder, name), "w") as fh:
            fh.write(text)
    os.mkdir(os.path.join(folder, "dir.json"))
    entries = read_registry(runtime)
    assert [e.pid for e in entries] == [agent.pid]
    assert entries[0].path == path
    # malformed files are left alone (an agent may be writing one)
    assert os.path.exists(os.path.join(folder, "bad.json"))


def test_missing_registry_is_empty(tmp_path):
    assert read_registry(str(tmp_path / "nowhere")) == []


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_entry(runtime: str, data: dict, name: str) -> str:
    folder = os.path.join(runtime, "agents")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        json.dump(data, fh)
    return path


def test_dead_pid_entry_and_its_socket_are_pruned(runtime):
    pid = dead_pid()
    sock_path = os.path.join(runtime, "agents", f"{pid}.sock")
    os.makedirs(os.path.dirname(sock_path), exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.close()
    path = write_entry(runtime, {"pid": pid, "create_time": time.time() - 5,
                                 "address": sock_path, "transport": "unix"}, f"{pid}.json")
    assert read_registry(runtime) == []
    assert not os.path.exists(path)
    assert not os.path.exists(sock_path)


def test_socket_outside_the_runtime_dir_is_never_deleted(runtime, tmp_path):
    pid = dead_pid()
    outside = tmp_path / "elsewhere.sock"
    outside.write_text("not ours to delete")
    path = write_entry(runtime, {"pid": pid, "create_time": 1.0, "address": str(outside),
                                 "transport": "unix"}, f"{pid}.json")
    assert read_registry(runtime) == []
    assert not os.path.exists(path)
    assert outside.exists()


def test_pid_reuse_is_detected_by_create_time(runtime):
    me = os.getpid()
    real = psutil.Process(me).create_time()
    reused = write_entry(runtime, {"pid": me, "create_time": real - 3600, "address": "/x.sock",
                                   "transport": "unix"}, "reused.json")
    close = write_entry(runtime, {"pid": me, "create_time": real + 0.5, "address": "/y.sock",
                                  "transport": "unix"}, "close.json")
    entries = read_registry(runtime)
    assert [e.path for e in entries] == [close]
    assert not os.path.exists(reused)


def test_prune_false_keeps_files(runtime):
    path = write_entry(runtime, {"pid": dead_pid(), "create_time": 1.0, "address": "/x.sock",
                                 "transport": "unix"}, "dead.json")
    assert read_registry(runtime, prune=False) == []
    assert os.path.exists(path)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown")
def test_files_owned_by_someone_else_are_never_deleted(runtime):
    path = write_entry(runtime, {"pid": dead_pid(), "create_time": 1.0, "address": "/x.sock",
                                 "transport": "unix"}, "theirs.json")
    os.chown(path, 65534, 65534)
    assert read_registry(runtime) == []
    assert os.path.exists(path)


def test_ownership_check_refuses_other_owners(runtime, monkeypatch):
    """Without root: pretend to be another uid, so the file is 'someone else's'."""
    if not hasattr(os, "getuid"):
        pytest.skip("POSIX only")
    path = write_entry(runtime, {"pid": dead_pid(), "create_time": 1.0, "address": "/x.sock",
                                 "transport": "unix"}, "theirs.json")
    real_uid = os.getuid()
    monkeypatch.setattr(agent_client.os, "getuid", lambda: real_uid + 12345)
    assert read_registry(runtime) == []
    assert os.path.exists(path)


# ------------------------------------------------------------- fuzzing

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from app.agent import protocol  # noqa: E402


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
                                                    "pid": 1, "auth": None}}))
            served.append(conn)

    t = threading.Thread(target=drain_later)
    t.start()
    entry = AgentEntry(pid=1, create_time=None, address=path, transport="unix")
    t0 = time.monotonic()
    conn = AgentConnection(entry, 3.0)  # connects
    assert conn.hello["pid"] == 1 and time.monotonic() - t0 >= 0.15
    conn.close()
    t.join(5)
    for s in fillers + served:
        s.close()
    listener.close()
