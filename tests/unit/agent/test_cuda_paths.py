"""The agent's CUDA code paths, against a fake at the ``torch.cuda`` boundary.

There is no GPU here: the real (CPU) torch module is monkeypatched where the
agent touches CUDA (``torch.cuda.is_initialized``, ``device_count``,
``memory_stats``, ``get_allocator_backend``, ``device``, ``empty_cache``,
``torch._C._cuda_attach_out_of_memory_observer``...).  Every fake records
its calls with the calling thread, so the tests can check *what* the agent
calls, *when* (never before CUDA is initialised) and *from which thread with
which device selected* (the current device is thread-local in CUDA).

Some tests call ``introspect`` / ``actions`` directly; the rest start an
agent in this process (its own runtime dir) and talk to it over its socket.
"""

from __future__ import annotations

import gc
import os
import shutil
import threading
import time
from typing import Any

import pytest
import torch

from app.agent import actions, introspect, protocol, runtime
from app.agent.introspect import CudaWatch
from tests.fakes import fake_cuda
from tests.fakes.fake_cuda import FakeCuda, GiB, MiB, native_stats

from .conftest import Client, short_tmpdir

# The report's device fields and the allocator keys they come from (the real
# names torch.cuda.memory_stats() uses).
FIELDS = {
    "allocated": "allocated_bytes.all.current",
    "peak_allocated": "allocated_bytes.all.peak",
    "reserved": "reserved_bytes.all.current",
    "peak_reserved": "reserved_bytes.all.peak",
    "active": "active_bytes.all.current",
    "inactive_split": "inactive_split_bytes.all.current",
    "requested": "requested_bytes.all.current",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
}


@pytest.fixture
def install(monkeypatch):
    """``install(fake)`` puts ``fake`` in place of torch.cuda on the real torch."""

    def _install(fake: FakeCuda, allocator: bool = False) -> FakeCuda:
        fake_cuda.install(monkeypatch, torch, fake, allocator)
        # process-wide state of the agent: fresh for every test
        monkeypatch.setattr(CudaWatch, "_attached_process", False)
        monkeypatch.setattr(CudaWatch, "_current", CudaWatch._current)  # restored after
        if hasattr(introspect, "_UUIDS"):
            monkeypatch.setattr(introspect, "_UUIDS", {})
        return fake

    return _install


@pytest.fixture
def agent():
    """An agent started in this process (own runtime dir), stopped in teardown.

    Request it *after* ``install`` so it stops before the fakes are undone.
    """
    assert not runtime.is_running(), "another in-process agent is still running"
    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.05, idle_timeout=30)
    current = runtime.current()
    assert current is not None and current.server is not None
    yield current
    runtime.stop()
    shutil.rmtree(rt, ignore_errors=True)


def call_collect(client: Client, method: str, params: dict | None = None
                 ) -> tuple[dict, list[dict]]:
    """``client.call`` that also returns the events received before the reply."""
    client.next_id += 1
    rid = client.next_id
    client.send_raw(protocol.encode(protocol.request(rid, method, params)))
    events = []
    while True:
        msg = client.recv()
        if msg.get("id") == rid and ("result" in msg or "error" in msg):
            return msg, events
        events.append(msg)


def drain_events(client: Client, settle: float = 0.3) -> list[dict]:
    """Events that arrive within ``settle`` seconds, then a ping round trip."""
    time.sleep(settle)
    _reply, events = call_collect(client, "ping")
    return events


def run_in_thread(fn, fake: FakeCuda, name: str) -> tuple[dict, threading.Thread]:
    """Run ``fn`` in a new thread; also note that thread's selected device after."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test
            box["error"] = exc
        box["current_after"] = fake.current()

    t = threading.Thread(target=target, name=name)
    t.start()
    t.join(30)
    assert not t.is_alive()
    if "error" in box:
        raise box["error"]
    return box, t


# --------------------------------------------------------------------------
# CUDA not initialised: nothing CUDA-ish is touched, ever


def test_nothing_cuda_is_called_while_cuda_is_not_initialised(install, monkeypatch):
    fake = install(FakeCuda([native_stats(GiB, 2 * GiB)], initialized=False))
    watch = CudaWatch(lambda *a: None)
    rep = introspect.build_report("t", None, watch, {"models": False})
    assert rep["torch_status"] == "loaded"
    assert rep["cuda_initialized"] is False
    assert rep["devices"] == [] and rep["allocator_backend"] is None
    assert rep["oom_events"] == 0 and rep["errors"] == []
    watch.tick(torch)
    result = actions.free_cache()
    assert result["reserved_before"] is None and result["reserved_after"] is None
    assert result["freed"] == 0 and result["devices"] == []
    assert "not initialised" in result["note"]
    actions.collect_garbage()
    assert set(fake.names()) == {"is_initialized"}, fake.calls
    assert fake.observers == [] and fake.empty_calls == []


def test_running_agent_never_touches_cuda_while_not_initialised(install, monkeypatch):
    fake = install(FakeCuda([native_stats(GiB, 2 * GiB)] * 2, initialized=False))
    monkeypatch.setattr(torch._C, "_cuda_hasPrimaryContext", fake.has_primary_context,
                        raising=False)
    rt = short_tmpdir()
    assert not runtime.is_running()
    assert runtime.start(runtime_dir=rt, tick_interval=0.02, idle_timeout=30)
    try:
        model = torch.nn.Linear(4, 4)  # something for the model scan to find
        c = Client(runtime.current().server.address)
        assert c.call("subscribe", {})["result"]["events"] == sorted(protocol.EVENTS)
        rep = c.call("report", {"models": True})["result"]
        assert rep["cuda_initialized"] is False and rep["devices"] == []
        assert rep["allocator_backend"] is None
        freed = c.call("free_cache")["result"]
        assert freed["freed"] == 0 and freed["devices"] == []
        assert "collected" in c.call("gc")["result"]
        time.sleep(0.3)  # ~15 agent ticks
        rep = c.call("report", {"models": True})["result"]
        assert rep["cuda_initialized"] is False
        c.close()
        del model
    finally:
        runtime.stop()
        shutil.rmtree(rt, ignore_errors=True)
    names = fake.names()
    assert names.count("is_initialized") >= 5  # the ticks did look
    assert set(names) == {"is_initialized"}, sorted(set(names))
    assert fake.observers == [] and fake.empty_calls == []


# --------------------------------------------------------------------------
# report: the devices map


def test_device_keys_are_the_allocators_real_names():
    assert dict(introspect.DEVICE_KEYS) == FIELDS


def test_report_devices_map_keys_exactly(install):
    full = native_stats(7 * GiB + 123, 9 * GiB + 4567, retries=3, ooms=1)
    partial = {  # an allocator (or torch version) without some of the keys
        "allocated_bytes.all.current": 5 * MiB,
        "reserved_bytes.all.current": 20 * MiB,
        "num_ooms": 0,  # a real zero stays zero
        "num_alloc_retries": True,  # not an integer figure: unknown
        "active_bytes.all.current": 1.5,  # ditto
    }
    fake = install(FakeCuda([full, partial]))
    watch = CudaWatch(lambda *a: None)
    rep = introspect.build_report("t", None, watch, {"models": False})
    assert rep["cuda_initialized"] is True and rep["errors"] == []
    assert rep["allocator_backend"] == "native"
    dev0, dev1 = rep["devices"]
    assert dev0["index"] == 0 and dev1["index"] == 1
    for field, key in FIELDS.items():
        assert dev0[field] == full[key], field
        assert type(dev0[field]) is int
    assert dev0["allocated"] == 7 * GiB + 123 and dev0["reserved"] == 9 * GiB + 4567
    assert dev1 == {**dev1, "allocated": 5 * MiB, "reserved": 20 * MiB, "num_ooms": 0,
                    "peak_allocated": None, "peak_reserved": None, "active": None,
                    "inactive_split": None, "requested": None, "num_alloc_retries": None}
    extra = {"index", "uuid"}  # uuid: added by device_figures, not an allocator figure
    for dev in (dev0, dev1):
        assert set(FIELDS) <= set(dev) <= set(FIELDS) | extra
        if "uuid" in dev:
            assert dev["uuid"] == "GPU-fake-%d" % dev["index"]
    assert [c[3] for c in fake.calls if c[0] == "memory_stats"] == [(0,), (1,)]
    assert protocol.encode({"result": rep})  # the report goes on the wire as is


def test_report_under_cuda_malloc_async_empty_stats(install):
    install(FakeCuda([{}], backend="cudaMallocAsync"))
    rep = introspect.build_report("t", None, CudaWatch(lambda *a: None), {"models": False})
    assert rep["allocator_backend"] == "cudaMallocAsync" and rep["errors"] == []
    (dev,) = rep["devices"]
    assert all(dev[field] is None for field in FIELDS), dev


def test_report_survives_memory_stats_raising(install):
    fake = install(FakeCuda([native_stats(GiB, GiB)]))
    fake.stats_error = RuntimeError("getDeviceStats is not supported")
    rep = introspect.build_report("t", None, CudaWatch(lambda *a: None), {"models": False})
    assert rep["devices"] == []
    assert any("memory_stats failed" in e and "getDeviceStats" in e for e in rep["errors"])


def test_report_over_the_socket_with_models(install, agent):
    install(FakeCuda([native_stats(3 * GiB, 4 * GiB), {}]))
    model = torch.nn.Linear(8, 8)
    c = Client(agent.server.address)
    rep = c.call("report", {"models": True})["result"]
    assert rep["cuda_initialized"] is True and rep["allocator_backend"] == "native"
    assert [d["reserved"] for d in rep["devices"]] == [4 * GiB, None]
    assert [d["allocated"] for d in rep["devices"]] == [3 * GiB, None]
    c.close()
    del model


# --------------------------------------------------------------------------
# free_cache


def two_devices(**kw: Any) -> FakeCuda:
    return FakeCuda([native_stats(1 * GiB, 6 * GiB), native_stats(2 * GiB, 3 * GiB)],
                    after_empty={0: 1 * GiB + 2 * MiB, 1: 2 * GiB}, **kw)


def test_free_cache_gc_first_then_each_device_selected_in_the_calling_thread(install,
                                                                              monkeypatch):
    fake = install(two_devices())
    real_collect = gc.collect

    def collect(*args: Any) -> int:
        fake._record("gc.collect")
        return real_collect(*args)

    monkeypatch.setattr(actions.gc, "collect", collect)
    box, thread = run_in_thread(actions.free_cache, fake, "vram-steward-agent-action")
    result = box["value"]
    mine = fake.names(thread.ident)
    assert mine[0] == "gc.collect"  # gc first: frees tensors only cycles still held
    assert mine.index("gc.collect") < mine.index("memory_stats") < mine.index("empty_cache")
    assert mine.count("empty_cache") == 2
    # once per device, that device selected, in the calling thread
    assert fake.empty_calls == [(thread.ident, "vram-steward-agent-action", 0),
                                (thread.ident, "vram-steward-agent-action", 1)]
    assert box["current_after"] is None  # the selection is undone afterwards
    assert fake.current() is None  # and never leaked into this (the user's) thread
    assert result["devices"] == [
        {"index": 0, "reserved_before": 6 * GiB, "reserved_after": 1 * GiB + 2 * MiB,
         "freed": 5 * GiB - 2 * MiB},
        {"index": 1, "reserved_before": 3 * GiB, "reserved_after": 2 * GiB, "freed": 1 * GiB},
    ]
    assert result["reserved_before"] == 9 * GiB
    assert result["reserved_after"] == 3 * GiB + 2 * MiB
    assert result["freed"] == result["reserved_before"] - result["reserved_after"]
    assert isinstance(result["gc_collected"], int) and result["seconds"] >= 0


def test_free_cache_freed_is_never_negative(install):
    # the training thread allocated more while we were emptying device 1
    fake = install(two_devices())
    fake.after_empty[1] = 4 * GiB
    result = actions.free_cache()
    assert [d["freed"] for d in result["devices"]] == [5 * GiB - 2 * MiB, 0]
    assert result["reserved_before"] == 9 * GiB
    assert result["reserved_after"] == 5 * GiB + 2 * MiB
    assert result["freed"] == 4 * GiB - 2 * MiB
    fake.after_empty = {0: 7 * GiB, 1: 4 * GiB}  # both grew: freed 0, not negative
    result = actions.free_cache()
    assert result["freed"] == 0 and all(d["freed"] == 0 for d in result["devices"])


def test_free_cache_unknown_reserved_is_none_not_zero(install):
    # cudaMallocAsync: empty stats; the totals must not pretend 0 bytes
    fake = install(FakeCuda([native_stats(GiB, 2 * GiB), {}], backend="cudaMallocAsync",
                            after_empty={0: GiB}))
    result = actions.free_cache()
    assert result["devices"][0] == {"index": 0, "reserved_before": 2 * GiB,
                                    "reserved_after": GiB, "freed": GiB}
    assert result["devices"][1] == {"index": 1, "reserved_before": None,
                                    "reserved_after": None, "freed": None}
    assert result["reserved_before"] is None and result["reserved_after"] is None
    assert result["freed"] is None
    assert [c[2] for c in fake.empty_calls] == [0, 1]  # still emptied both


def test_free_cache_leaves_devices_without_a_context_alone(install):
    # a process that only uses cuda:0 on a 2-GPU machine: selecting cuda:1 would
    # create a CUDA context there (hundreds of MiB) and there is nothing to free
    fake = two_devices()
    fake.contexts = {0}
    install(fake)
    result = actions.free_cache()
    assert [c[2] for c in fake.empty_calls] == [0]
    assert ("device", 1) not in [(c[0],) + c[3] for c in fake.calls]
    assert result["devices"][1]["reserved_before"] == result["devices"][1]["reserved_after"]
    assert result["devices"][1]["freed"] == 0
    assert result["freed"] == 5 * GiB - 2 * MiB


def test_free_cache_raising_empty_cache_is_a_reported_error(install):
    fake = install(two_devices())
    fake.empty_error = RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="cuda:0"):
        actions.free_cache()  # the handler raises; the server reports it (next test)
    assert fake.current() is None


def test_free_cache_over_the_socket(install, agent):
    fake = install(two_devices())
    c = Client(agent.server.address)
    reply = c.call("free_cache")
    result = reply["result"]
    assert result["freed"] == 6 * GiB - 2 * MiB
    assert result["reserved_before"] == 9 * GiB
    assert [(d["index"], d["freed"]) for d in result["devices"]] == [(0, 5 * GiB - 2 * MiB),
                                                                      (1, GiB)]
    # on the agent's action thread, each device selected there; never in ours
    names = {c[1] for c in fake.empty_calls}
    assert names == {"vram-steward-agent-action"}
    assert [c[2] for c in fake.empty_calls] == [0, 1]
    assert threading.get_ident() not in {c[0] for c in fake.empty_calls}

    # a raising empty_cache: a ``failed`` reply, the agent keeps serving
    fake.empty_error = RuntimeError("CUDA error: out of memory")
    reply = c.call("free_cache")
    assert reply["error"]["code"] == protocol.FAILED
    assert "cuda:0" in reply["error"]["message"]
    assert "out of memory" in reply["error"]["message"]
    assert c.call("ping")["result"] == {"pong": True}
    fake.empty_error = None
    assert "freed" in c.call("free_cache")["result"]  # not stuck "busy"
    c.close()


def test_free_cache_error_reaches_the_apps_client(install, agent):
    from app.core.agents import client as agent_client
    from app.core.agents import registry as agent_registry
    fake = install(two_devices())
    fake.empty_error = RuntimeError("CUDA error: device-side assert triggered")
    entry = next(e for e in agent_registry.read_registry(os.path.dirname(agent.registry_dir))
                 if e.pid == os.getpid())
    res = agent_client.free_cache(entry, 10.0)
    assert res.ok is False and "device-side assert" in (res.error or "")
    fake.empty_error = None
    res = agent_client.free_cache(entry, 10.0)
    assert res.ok is True and res.freed == 6 * GiB - 2 * MiB
    assert res.reserved_before == 9 * GiB and res.reserved_after == 3 * GiB + 2 * MiB


# --------------------------------------------------------------------------
# OOM observer and alloc retries


def test_oom_observer_attached_once_per_process(install):
    fake = install(FakeCuda([native_stats(GiB, GiB)]))
    events: list = []
    watch = CudaWatch(lambda n, d: events.append((n, d)))
    watch.activate()
    try:
        for _ in range(3):
            introspect.build_report("t", None, watch, {"models": False})
            watch.tick(torch)
        # a second agent in the same process (stop + start): still not again
        watch2 = CudaWatch(lambda n, d: events.append(("second", n, d)))
        watch2.tick(torch)
    finally:
        watch.deactivate()
    assert fake.observers == [CudaWatch._observer]
    assert fake.names().count("attach_oom_observer") == 1


def test_oom_observer_not_attached_before_cuda_is_initialised(install):
    fake = install(FakeCuda([native_stats(GiB, GiB)], initialized=False))
    watch = CudaWatch(lambda *a: None)
    watch.tick(torch)
    introspect.build_report("t", None, watch, {"models": False})
    assert fake.observers == []
    fake.initialized = True  # the user's code initialises CUDA later
    watch.tick(torch)
    assert len(fake.observers) == 1


def test_oom_observer_failing_to_attach_is_not_an_error(install, monkeypatch):
    fake = install(FakeCuda([native_stats(GiB, GiB)]))

    def refuse(fn: Any) -> None:
        raise RuntimeError("not supported by this allocator")

    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", refuse)
    watch = CudaWatch(lambda *a: None)
    rep = introspect.build_report("t", None, watch, {"models": False})
    assert rep["errors"] == [] and rep["devices"][0]["reserved"] == GiB
    assert fake.observers == []


@pytest.mark.parametrize("args", [
    (0, 2 * GiB, 70 * GiB, 512 * MiB),  # what the allocator passes
    (None, None, None, None),
    ("0", b"x", object(), float("nan")),
    (True, -1, 2 ** 80, [1, 2]),
])
def test_oom_observer_never_raises(install, args):
    install(FakeCuda([native_stats(GiB, GiB)]))
    CudaWatch._observer(*args)  # no watch active: nothing to do

    def bad_emit(name: str, data: dict) -> None:
        raise RuntimeError("emit failed")

    watch = CudaWatch(bad_emit)
    watch.activate()
    try:
        CudaWatch._observer(*args)
        assert watch.oom_events == 1
    finally:
        watch.deactivate()
    got: list = []
    watch = CudaWatch(lambda n, d: got.append((n, d)))
    watch.activate()
    try:
        CudaWatch._observer(*args)
    finally:
        watch.deactivate()
    (name, data), = got
    assert name == "oom" and watch.oom_events == 1
    protocol.encode(protocol.event(name, data))  # always encodable
    for key, value in zip(("device", "alloc", "device_allocated", "device_free"), args):
        ok = isinstance(value, int) and not isinstance(value, bool)
        assert data[key] == (value if ok else None)


def test_oom_event_reaches_subscribers(install, agent):
    fake = install(FakeCuda([native_stats(GiB, 2 * GiB)]))
    sub = Client(agent.server.address)
    other = Client(agent.server.address)
    assert sub.call("subscribe", {"events": ["oom"]})["result"] == {"events": ["oom"]}
    rep = sub.call("report", {"models": False})["result"]
    assert rep["oom_events"] == 0
    deadline = time.monotonic() + 5
    while not fake.observers and time.monotonic() < deadline:
        time.sleep(0.01)
    (observer,) = fake.observers  # attached by the report (or a tick), exactly once

    # what the allocator does on a failed cudaMalloc: call it from the
    # allocating (user) thread, before raising OutOfMemoryError
    observer(0, 4 * GiB, 70 * GiB, 100 * MiB)
    msg = sub.recv()
    assert msg["event"] == "oom"
    assert {k: msg["data"][k] for k in ("device", "alloc", "device_allocated",
                                        "device_free")} == {
        "device": 0, "alloc": 4 * GiB, "device_allocated": 70 * GiB,
        "device_free": 100 * MiB}
    assert isinstance(msg["data"]["time"], float)

    observer(object(), "garbage", None, 1.5)  # never raises, event still well formed
    msg = sub.recv()
    assert msg["event"] == "oom" and msg["data"]["device"] is None
    reply, events = call_collect(sub, "report", {"models": False})
    assert events == [] and reply["result"]["oom_events"] == 2
    assert drain_events(other, 0.1) == []  # not subscribed: nothing
    assert fake.names().count("attach_oom_observer") == 1
    sub.close()
    other.close()


def test_alloc_retries_event_when_retries_rise(install):
    fake = install(FakeCuda([native_stats(GiB, GiB, retries=2), native_stats(GiB, GiB)]))
    got: list = []
    watch = CudaWatch(lambda n, d: got.append((n, d)))
    watch.tick(torch)  # first look: the baseline, no event
    assert got == []
    fake.stats[1]["num_alloc_retries"] = 3
    watch.tick(torch)
    assert [(n, d["device"], d["num_alloc_retries"], d["new"]) for n, d in got] == [
        ("alloc_retries", 1, 3, 3)]
    watch.tick(torch)  # unchanged: nothing more
    introspect.build_report("t", None, watch, {"models": False})
    assert len(got) == 1
    fake.stats[0]["num_alloc_retries"] = 7
    introspect.build_report("t", None, watch, {"models": False})  # reports look too
    assert [(n, d["device"], d["num_alloc_retries"], d["new"]) for n, d in got[1:]] == [
        ("alloc_retries", 0, 7, 5)]
    fake.stats[0] = {}  # figure gone (e.g. stats reset to another backend): no event
    watch.tick(torch)
    assert len(got) == 2


def test_alloc_retries_event_reaches_subscribers(install, agent):
    fake = install(FakeCuda([native_stats(GiB, 2 * GiB, retries=0)]))
    sub = Client(agent.server.address)
    assert sub.call("subscribe", {"events": ["alloc_retries"]})["result"] == {
        "events": ["alloc_retries"]}
    reply, events = call_collect(sub, "report", {"models": False})  # baseline
    assert reply["result"]["devices"][0]["num_alloc_retries"] == 0
    time.sleep(0.15)  # let a few ticks see the baseline too
    events += drain_events(sub, 0)
    assert events == []
    fake.stats[0]["num_alloc_retries"] = 4
    # the agent's own tick (every 50 ms here) notices it, no request needed
    sub.sock.settimeout(5)
    msg = sub.recv()
    assert msg["event"] == "alloc_retries"
    assert msg["data"]["device"] == 0 and msg["data"]["num_alloc_retries"] == 4
    assert msg["data"]["new"] == 4
    assert drain_events(sub, 0.2) == []  # once per rise, not once per tick
    sub.close()


def test_agent_thread_survives_raising_memory_stats(install, agent):
    # memory_stats raising in the agent thread's tick and in a report
    fake = install(FakeCuda([native_stats(GiB, GiB)]))
    fake.stats_error = RuntimeError("boom")
    time.sleep(0.2)  # a few ticks
    c = Client(agent.server.address)
    rep = c.call("report", {"models": False})["result"]
    assert rep["devices"] == [] and any("boom" in e for e in rep["errors"])
    assert c.call("ping")["result"] == {"pong": True}
    assert agent.server.thread is not None and agent.server.thread.is_alive()
    c.close()
