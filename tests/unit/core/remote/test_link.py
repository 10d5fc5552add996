"""One remote host kept connected on a thread of its own (``HostLink``), with
a scripted client in place of a server: what the window reads of it, how a
failure reads, the back-off, the heartbeat, and that nothing it does blocks
its caller."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest

from app.core.agents.events import ModelEventRecord
from app.core.agents.types import ModelEvent
from app.core.diagnosis.types import Diagnosis, OomReport
from app.core.monitor.hosts import CONNECTED, CONNECTING, DISCONNECTED
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.remote import link as link_module
from app.core.remote.errors import RemoteError, RemoteUnavailable
from app.core.remote.host_config import HostConfig
from app.core.remote.link import HEARTBEAT_S, HostLink
from app.core.store.records import history_records
from tests.unit.core.remote.test_history_seed import stored

GiB = 1 << 30
SSH = HostConfig("ssh://me@gpu1:2222")
HOST_KEY_FAILED = ("ssh://me@gpu1:2222: the connection ended (ssh exit status 255): "
                   "Host key verification failed.")


def wait_for(what, probe, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        answer = probe()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def snapshot(seq: int, gpus: int = 2, events=(), ooms=(), diagnoses=()) -> Snapshot:
    """A server's snapshot, stamped by the server's clock (an hour behind ours)."""
    samples = tuple(GpuSample(i, "NVIDIA A100", f"GPU-{i}", 80 * GiB, (seq + i) * GiB, None,
                              processes=(ProcessSample(100 + i, GiB),)) for i in range(gpus))
    return Snapshot(time.time() - 3600.0, 50.0 + seq, "nvml", "580.95", samples,
                    agents={100: f"report {seq}"}, model_events=tuple(events),
                    oom_reports=tuple(ooms), diagnoses=tuple(diagnoses))


def event(seq: int, when: float, gpu: str | None = "0") -> ModelEventRecord:
    return ModelEventRecord(100, ModelEvent(seq, when, "m1", "net", "unload", "offloaded"), gpu,
                            when, f"Unloaded net ({seq})", GiB)


PING = "ping"
END = object()


class FakeClient:
    """A server's client: ``hello``, ``history`` and a stream the test feeds
    (snapshots, pings, an error); ``close`` ends the stream, as a transport's does."""

    def __init__(self, history: Any = (), hello: dict | None = None,
                 held: threading.Event | None = None) -> None:
        self.feed: queue.Queue[Any] = queue.Queue()
        self.closed = threading.Event()
        self._history = history
        self._hello = hello if hello is not None else {
            "host": "gpu1.lab", "user": "me", "time": time.time() - 3600.0}
        self._held = held  # set: closing waits for it (ssh may take a moment)
        self.streaming = threading.Event()

    def hello(self) -> dict:
        return self._hello

    def policy(self) -> Any:
        raise RemoteError("this server has no policy verb", "unknown_method")

    def history(self, since_s: float, timeout_s: float = 60.0) -> list[dict]:
        self.asked_since_s = since_s
        if isinstance(self._history, BaseException):
            raise self._history
        return list(self._history)

    def snapshots(self, on_frame=None):
        self.streaming.set()
        while True:
            item = self.feed.get()
            if item is END:
                raise RemoteUnavailable("https://gpu1:8443 closed the stream")
            if on_frame is not None:
                on_frame()
            if item is PING:
                continue
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        if self._held is not None:
            self._held.wait(10)
        self.closed.set()
        self.feed.put(END)


class Script:
    """``connect``: each call takes the next client or error (the last repeats)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[float] = []

    def __call__(self, config: HostConfig) -> Any:
        self.calls.append(time.monotonic())
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if callable(answer) and not isinstance(answer, FakeClient):
            answer = answer()
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Waits(threading.Event):
    """The link's stop event, noting each back-off it waits (and waiting little)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.asked.append(timeout)
            timeout = min(timeout, 0.01)
        return super().wait(timeout)


@pytest.fixture
def links():
    made: list[HostLink] = []

    def make(config: HostConfig, key: str, connect: Any, **kw: Any) -> HostLink:
        link = HostLink(config, key, connect, **kw)
        link._stop = Waits()  # the back-off without its waits
        made.append(link)
        return link

    yield make
    for link in made:
        link.close()
        assert link.join(5.0), f"{link.key}'s thread did not end"


def test_a_host_that_cannot_be_reached_says_why_and_what_to_do(links):
    link = links(SSH, "gpu1", Script(RemoteUnavailable(HOST_KEY_FAILED)))
    first = link.view()
    assert (first.key, first.url, first.state, first.snapshot) == \
        ("gpu1", "ssh://me@gpu1:2222", CONNECTING, None)
    link.start()
    view = wait_for("a reason", lambda: (v := link.view()).reason and v)
    assert view.state == DISCONNECTED and view.snapshot is None and not view.fresh
    assert "Host key verification failed" in view.reason
    assert "`ssh -p 2222 me@gpu1` once in a terminal" in view.reason
    with pytest.raises(RemoteUnavailable, match="gpu1 is disconnected: .*once in a terminal"):
        link.client()


def test_a_bad_token_file_and_a_bug_are_reasons_and_the_link_keeps_trying(links):
    seen = [threading.Event(), threading.Event()]

    def after(step: int, error: BaseException):
        def answer():
            seen[step].wait(10)  # each reason is read before the next try
            raise error
        return answer

    script = Script(ValueError("token file /t holds no token"), after(0, KeyError("oops")),
                    after(1, RemoteError("https://gpu1:8443: wrong token", "unauthorized")))
    link = links(HostConfig("https://gpu1:8443"), "gpu1:8443", script)
    link.start()
    assert wait_for("the first", lambda: link.view().reason) == "token file /t holds no token"
    seen[0].set()
    assert wait_for("the second", lambda: (r := link.view().reason) != (
        "token file /t holds no token") and r) == "KeyError: 'oops'"
    seen[1].set()
    third = wait_for("the third", lambda: (r := link.view().reason).startswith("https") and r)
    assert third.startswith("https://gpu1:8443 refused the token")
    assert link.view().state == DISCONNECTED


def test_snapshots_arrive_qualified_with_the_host_and_each_event_once(links):
    client = FakeClient()
    link = links(SSH, "gpu1", Script(client))
    link.start()
    host_now = time.time() - 3600.0
    ev = event(1, host_now - 2.0)
    oom = OomReport("1-100-1", host_now, 100, None, "1", "GPU-1", None, None, None, None,
                    "unknown", (), (), (), {})
    diag = Diagnosis("idle_cache", "info", "cache", (), gpu="0")
    client.feed.put(snapshot(1, events=[ev], ooms=[oom], diagnoses=[diag]))
    view = wait_for("the first snapshot", lambda: (v := link.view()).snapshot and v)
    assert view.state == CONNECTED and view.reason is None and view.fresh
    assert (view.name, view.user) == ("gpu1.lab", "me")
    snap = view.snapshot
    assert [g.display_id for g in snap.gpus] == ["0@gpu1", "1@gpu1"]
    assert {g.host for g in snap.gpus} == {"gpu1"} and [g.index for g in snap.gpus] == [0, 1]
    assert snap.gpus[0].processes[0].pid == 100  # pids stay the host's own
    assert snap.agents == {100: "report 1"}
    # stamped by this machine's clocks when it arrived
    assert abs(snap.timestamp - time.time()) < 5 and abs(snap.monotonic - time.monotonic()) < 5
    (got,) = snap.model_events
    assert got.display_id == "0@gpu1" and abs(got.time - (time.time() - 2.0)) < 5
    assert [r.gpu for r in snap.oom_reports] == ["1@gpu1"]
    assert [d.gpu for d in snap.diagnoses] == ["0@gpu1"]
    again = link.view()  # nothing new: the same snapshot, not fresh, no events again
    assert not again.fresh and again.snapshot is not None
    assert again.snapshot.model_events == () and again.snapshot.oom_reports == ()
    assert [g.display_id for g in again.snapshot.gpus] == ["0@gpu1", "1@gpu1"]
    # two snapshots more: each event comes once, whichever views they fall between
    client.feed.put(snapshot(2, events=[event(2, host_now)]))
    client.feed.put(snapshot(3, events=[event(3, host_now, None)]))
    got: list = []

    def taken() -> bool:
        view = link.view()
        if view.fresh:
            got.extend(view.snapshot.model_events)
        else:
            assert view.snapshot.model_events == ()
        return view.snapshot.agents[100] == "report 3"

    wait_for("snapshot 3", taken)
    assert [e.event.seq for e in got] == [2, 3]
    assert [e.display_id for e in got] == ["0@gpu1", None]
    assert not link.view().fresh and link.view().snapshot.model_events == ()


def test_the_stored_history_is_handed_out_once_on_this_machines_clock(links):
    client = FakeClient(history=history_records(stored()))
    link = links(SSH, "gpu1", Script(client))
    link.start()
    client.feed.put(snapshot(1))
    seeds = []
    wait_for("a snapshot", lambda: (v := link.view(), seeds.append(v.seed))[0].snapshot)
    (seed,) = [s for s in seeds if s is not None]
    assert {s.display_id for s in seed.gpus.values()} == {"0@gpu1", "1@gpu1"}
    # the host's clock is an hour behind: its times are moved onto ours
    original = stored().gpus["GPU-a"].t
    assert abs(seed.gpus["GPU-a"].t[0] - (original[0] + 3600.0)) < 5
    assert link.view().seed is None


def test_a_server_without_history_still_connects(links):
    client = FakeClient(history=RemoteError("this server keeps no history", "no_history"))
    link = links(SSH, "gpu1", Script(client))
    link.start()
    client.feed.put(snapshot(1))
    view = wait_for("a snapshot", lambda: (v := link.view()).snapshot and v)
    assert view.state == CONNECTED and view.seed is None


def test_a_lost_stream_keeps_the_last_snapshot_and_backs_off_until_it_works(links):
    first, second = FakeClient(), FakeClient()
    down = RemoteUnavailable("cannot reach https://gpu1:8443: connection refused")
    script = Script(first, down, down, down, down, down, down, down, second)
    link = links(HostConfig("https://gpu1:8443"), "gpu1:8443", script)
    link.start()
    first.feed.put(snapshot(1))
    wait_for("connected", lambda: link.view().state == CONNECTED)
    lost_at = time.time()
    first.feed.put(RemoteUnavailable("https://gpu1:8443 closed the stream"))
    view = wait_for("disconnected", lambda: (v := link.view()).state == DISCONNECTED and v)
    assert abs(view.since - lost_at) < 5
    assert view.snapshot is not None and view.snapshot.agents == {100: "report 1"}  # the last
    assert [g.display_id for g in view.snapshot.gpus] == ["0@gpu1:8443", "1@gpu1:8443"]
    since = view.since
    reasons = set()
    while not second.streaming.is_set():  # every retry: still disconnected since the loss
        view = link.view()
        assert view.state == DISCONNECTED and view.since == since, view
        reasons.add(view.reason)
        time.sleep(0.001)
    assert reasons <= {"https://gpu1:8443 closed the stream", str(down)} and str(down) in reasons
    assert link._stop.asked[:8] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    second.feed.put(snapshot(2))
    view = wait_for("connected again", lambda: (v := link.view()).state == CONNECTED and v)
    assert view.since >= since and view.reason is None
    # a stream that worked starts the back-off again from its first step
    second.feed.put(RemoteUnavailable("https://gpu1:8443 closed the stream"))
    wait_for("another retry", lambda: len(link._stop.asked) > 8)
    assert link._stop.asked[8] == 1.0


def test_a_silent_connection_is_ended_by_the_heartbeat(links):
    client = FakeClient()
    retried = threading.Event()

    def frozen() -> FakeClient:  # the host is still stuck: the next try hangs a while
        retried.wait(10)
        raise RemoteUnavailable("ssh://me@gpu1:2222: no answer within 10 s")

    link = links(SSH, "gpu1", Script(client, frozen))
    link.start()
    client.feed.put(snapshot(1))
    wait_for("connected", lambda: link.view().state == CONNECTED)
    assert not link.check_heartbeat(time.monotonic() + HEARTBEAT_S / 2)
    client.feed.put(PING)  # a ping is heard as much as a snapshot
    time.sleep(0.05)
    assert not link.check_heartbeat(time.monotonic())
    assert link.check_heartbeat(time.monotonic() + HEARTBEAT_S + 1.0)
    assert link.view().state == DISCONNECTED  # at once, not when the close is done
    assert not link.check_heartbeat(time.monotonic() + HEARTBEAT_S + 2.0)  # closed once
    assert client.closed.wait(5), "the silent connection was not closed"
    view = wait_for("disconnected", lambda: (v := link.view()).state == DISCONNECTED and v)
    assert view.reason.startswith("stopped answering: nothing for ")
    assert "stuck" in view.reason
    assert view.snapshot is not None  # the last figures stay, greyed by the window
    assert not link.check_heartbeat(time.monotonic() + 100.0)  # only a connected host
    retried.set()


def test_nothing_the_link_does_blocks_its_caller(links):
    held = threading.Event()
    client = FakeClient(held=held)  # closing it waits until the test lets it
    link = links(SSH, "gpu1", Script(client))
    link.start()
    client.feed.put(snapshot(1))
    wait_for("connected", lambda: link.view().state == CONNECTED)
    started = time.monotonic()
    assert link.check_heartbeat(time.monotonic() + HEARTBEAT_S + 1.0)
    link.view()
    link.close()
    assert time.monotonic() - started < 5.0 and not client.closed.is_set()
    held.set()
    assert client.closed.wait(5)


def test_a_link_closed_while_connecting_closes_what_it_connected(links):
    release = threading.Event()
    client = FakeClient()

    def slow() -> FakeClient:
        release.wait(5)
        return client

    link = links(SSH, "gpu1", Script(slow))
    link.start()
    time.sleep(0.05)
    link.close()  # while ssh is still starting
    release.set()
    assert link.join(5)
    assert client.closed.wait(5), "a connection made after close() was left open"


def test_actions_on_a_disconnected_host_are_refused_with_its_reason(links):
    link = links(SSH, "gpu1", Script(RemoteUnavailable(HOST_KEY_FAILED)))
    link.start()
    wait_for("a reason", lambda: link.view().reason)
    result = link.agents.free_cache(100)
    assert not result.ok and "gpu1 is disconnected" in result.error
    assert "once in a terminal" in result.error
    answer = link.agents.terminate(100, 123.0)
    assert answer["outcome"] == "refused" and "gpu1 is disconnected" in answer["reason"]
    assert link.agents.reports() == {}


def test_the_agents_of_a_host_are_its_latest_snapshots(links, monkeypatch):
    client = FakeClient()
    link = links(SSH, "gpu1", Script(client))
    link.start()
    client.feed.put(snapshot(4))
    wait_for("connected", lambda: link.view().state == CONNECTED)
    assert link.agents.reports() == {100: "report 4"}
    assert link.client() is client
    link.agents.close()  # the link owns the connection
    assert not client.closed.is_set()


def test_the_back_off_grows_to_its_bound(monkeypatch, links):
    monkeypatch.setattr(link_module, "RETRY_MAX_S", 4.0)
    link = links(SSH, "gpu1", Script(RemoteUnavailable("refused")))
    link.start()
    wait_for("five retries", lambda: len(link._stop.asked) >= 5)
    assert link._stop.asked[:5] == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_pings_without_new_figures_read_as_a_stuck_host(links, monkeypatch):
    client = FakeClient()
    link = links(SSH, "gpu1", Script(client))
    link.start()
    client.feed.put(snapshot(1))
    wait_for("connected", lambda: link.view().state == CONNECTED)
    arrived = link.latest().timestamp
    later = time.monotonic() + link_module.STUCK_S + 1.0
    monkeypatch.setattr(link_module.time, "monotonic", lambda: later)
    link._heard_now()  # pings keep the connection alive…
    assert not link.check_heartbeat(later)
    view = link.view()  # …but its figures are not current any more
    assert view.state == DISCONNECTED and view.since == arrived
    assert "no new figures" in view.reason and "stuck" in view.reason
    assert view.snapshot is not None and view.snapshot.gpus[0].memory_used == 1 * GiB


def test_a_reconnection_reads_only_what_the_host_kept_since_its_last_snapshot(links):
    first, second = FakeClient(history=[]), FakeClient(history=[])
    link = links(SSH, "gpu1", Script(first, second), seed_s=3600.0)
    link.start()
    first.feed.put(snapshot(1))
    wait_for("connected", lambda: link.view().state == CONNECTED)
    assert first.asked_since_s == 3600.0  # the first connection: the whole hour
    first.feed.put(END)  # the stream ends: the link connects again
    wait_for("the second connection's stream", second.streaming.is_set)
    # the last snapshot came a moment ago: only the seconds since are asked for
    assert 1.0 <= second.asked_since_s <= 10.0
    second.feed.put(snapshot(2))
    wait_for("connected again", lambda: (v := link.view()).state == CONNECTED
             and v.snapshot.gpus[0].memory_used == 2 * GiB)


def test_a_history_that_cannot_be_read_is_no_reason_not_to_stream(links):
    client = FakeClient(history=RemoteUnavailable("ssh://me@gpu1:2222: no answer to history"))
    link = links(SSH, "gpu1", Script(client))
    link.start()
    client.feed.put(snapshot(1))
    view = wait_for("connected", lambda: (v := link.view()).state == CONNECTED and v)
    assert view.seed is None and view.clock_skew_s == pytest.approx(3600.0, abs=5.0)
