"""The ``record`` method, against the fake at the ``torch.cuda`` / ``torch._C``
boundary, over a running agent's real socket (and the app's client)."""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import threading
import time

import pytest
import torch

from app.agent import introspect, protocol, recording, runtime
from app.agent.introspect import CudaWatch
from app.core.agents import client as agent_client
from app.core.agents import registry as agent_registry
from tests.fakes import fake_cuda
from tests.fakes.fake_cuda import FakeCuda, GiB, MiB, frame, native_stats

from .conftest import Client, short_tmpdir

TORCH_FILE = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "linear.py")
AGENT_FILE = os.path.join(os.path.dirname(recording.__file__), "guard.py")


def user_frames(line: int, name: str = "step") -> list[dict]:
    """Innermost first, as torch records them: torch's own and the agent's
    frames come before the user's line."""
    return [frame(TORCH_FILE, 125, "forward"), frame(AGENT_FILE, 10, "pre_hook"),
            frame("/home/u/project/train.py", line, name), frame("/home/u/main.py", 3, "main")]


def traces() -> list[list[dict]]:
    def alloc(addr: int, size: int, line: int) -> dict:
        return {"action": "alloc", "addr": addr, "size": size, "stream": 0,
                "time_us": 1, "frames": user_frames(line)}

    def free(addr: int, size: int, action: str = "free_requested") -> dict:
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 2,
                "frames": []}

    device0 = [alloc(1, 100 * MiB, 42), alloc(2, 100 * MiB, 42), free(1, 100 * MiB),
               free(1, 100 * MiB, "free_completed"), alloc(3, 8 * MiB, 50),
               {"action": "segment_alloc", "addr": 9, "size": 2 * GiB, "frames": []},
               alloc(4, MiB, 60) | {"frames": [frame(TORCH_FILE, 1, "empty")]}]
    device1 = [alloc(5, 300 * MiB, 70), free(5, 300 * MiB)]
    return [device0, device1]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(tmp_path / "state"))
    f = FakeCuda([native_stats(GiB, 2 * GiB)])
    f.traces = traces()
    fake_cuda.install(monkeypatch, torch, f, allocator=True)
    monkeypatch.setattr(CudaWatch, "_attached_process", False)
    monkeypatch.setattr(CudaWatch, "_current", CudaWatch._current)
    monkeypatch.setattr(introspect, "_UUIDS", {})
    return f


@pytest.fixture
def agent(fake):
    assert not runtime.is_running()
    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.05, idle_timeout=30)
    current = runtime.current()
    assert current is not None and current.server is not None
    yield current, rt
    runtime.stop()
    shutil.rmtree(rt, ignore_errors=True)


def test_records_bounded_with_python_stacks_and_turns_it_off(fake, agent, tmp_path):
    live, _rt = agent
    c = Client(live.server.address)
    started = time.monotonic()
    reply = c.call("record", {"seconds": 1, "max_entries": 5000})
    assert time.monotonic() - started >= 1.0
    result = reply["result"]
    on, off = fake.history_calls
    assert on == {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 5000,
                  "clear_history": True}
    assert off["enabled"] is None and fake.history_enabled is False
    path = result["path"]
    assert os.path.dirname(path) == str(tmp_path / "state" / "recordings")
    assert os.path.basename(path).startswith("%d-" % os.getpid()) and path.endswith(".pickle")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, "rb") as f:  # the test's own file: what memory_viz opens
        written = pickle.load(f)
    assert written["device_traces"] == fake.traces and "segments" in written
    assert result["entries"] == 9 and result["truncated"] is False
    assert result["device"] is None and 1.0 <= result["seconds"] < 5
    assert result["sites"] == [
        {"site": "train.py:70 in step", "bytes": 300 * MiB, "count": 1, "live_bytes": 0},
        {"site": "train.py:42 in step", "bytes": 200 * MiB, "count": 2,
         "live_bytes": 100 * MiB},
        {"site": "train.py:50 in step", "bytes": 8 * MiB, "count": 1, "live_bytes": 8 * MiB},
        {"site": "linear.py:1 in empty", "bytes": MiB, "count": 1, "live_bytes": MiB},
    ]
    c.close()


def test_truncated_when_the_entry_bound_is_reached(fake, agent):
    live, _rt = agent
    fake.traces = [[{"action": "alloc", "addr": i, "size": 512, "frames": []}
                    for i in range(1000)]]
    c = Client(live.server.address)
    result = c.call("record", {"seconds": 1, "max_entries": 1000})["result"]
    assert result["entries"] == 1000 and result["truncated"] is True
    assert result["sites"] == [{"site": "(no Python frames)", "bytes": 512000, "count": 1000,
                                "live_bytes": 512000}]
    c.close()


def test_refused_while_the_users_own_recording_is_on(fake, agent):
    live, _rt = agent
    fake.history_enabled = True
    c = Client(live.server.address)
    error = c.call("record", {"seconds": 1})["error"]
    assert error["code"] == "refused" and "own code" in error["message"]
    assert fake.history_calls == [] and fake.history_enabled is True  # left alone
    c.close()


def test_refused_without_cuda(fake, agent):
    live, _rt = agent
    fake.initialized = False
    c = Client(live.server.address)
    error = c.call("record", {"seconds": 1})["error"]
    assert error["code"] == "refused" and error["message"].startswith("CUDA only")
    assert fake.history_calls == []
    c.close()


def test_refused_when_torch_lacks_the_api(fake, agent, monkeypatch):
    live, _rt = agent
    monkeypatch.delattr(torch._C, "_cuda_isHistoryEnabled")
    c = Client(live.server.address)
    error = c.call("record", {"seconds": 1})["error"]
    assert error["code"] == "refused" and "CUDA only" in error["message"]
    c.close()


@pytest.mark.parametrize("params", [{}, {"seconds": 0}, {"seconds": 301}, {"seconds": "5"},
                                    {"seconds": True}, {"seconds": 5, "max_entries": 999},
                                    {"seconds": 5, "max_entries": 500_001},
                                    {"seconds": 5, "max_entries": 1500.5}])
def test_bad_params(fake, agent, params):
    live, _rt = agent
    c = Client(live.server.address)
    assert c.call("record", params)["error"]["code"] == "bad_params"
    assert fake.history_calls == []
    c.close()


def test_busy_while_recording_and_the_agent_keeps_answering(fake, agent):
    live, _rt = agent
    first = Client(live.server.address)
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("r", first.call("record",
                                                                      {"seconds": 2})))
    t.start()
    deadline = time.monotonic() + 5
    while not fake.history_calls and time.monotonic() < deadline:
        time.sleep(0.01)
    second = Client(live.server.address)
    error = second.call("record", {"seconds": 1})["error"]
    assert error["code"] == "busy" and "record" in error["message"]
    # the loop and the action worker are free meanwhile
    assert second.call("ping")["result"] == {"pong": True}
    assert second.call("report", {"models": False})["result"]["cuda_initialized"] is True
    assert "collected" in second.call("gc")["result"]
    t.join(10)
    assert "result" in box["r"] and fake.history_enabled is False
    assert len(fake.history_calls) == 2  # the refused one changed nothing
    first.close()
    second.close()


def test_turned_off_when_the_snapshot_fails(fake, agent):
    live, _rt = agent
    fake.history_snapshot_error = RuntimeError("snapshot failed")
    c = Client(live.server.address)
    error = c.call("record", {"seconds": 1})["error"]
    assert error["code"] == "failed" and "snapshot failed" in error["message"]
    assert [call["enabled"] for call in fake.history_calls] == ["all", None]
    assert fake.history_enabled is False
    c.close()


def test_turned_off_when_the_app_goes_away_and_when_the_agent_stops(fake, agent):
    live, _rt = agent
    c = Client(live.server.address)
    c.send_raw(protocol.encode(protocol.request(1, "record", {"seconds": 300})))
    deadline = time.monotonic() + 5
    while not fake.history_calls and time.monotonic() < deadline:
        time.sleep(0.01)
    c.close()  # the app went away: the recording goes on to its deadline ...
    time.sleep(0.2)
    assert fake.history_enabled is True
    runtime.stop()  # ... or until the agent stops
    deadline = time.monotonic() + 5
    while fake.history_enabled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.history_enabled is False and fake.history_calls[-1]["enabled"] is None


def test_the_apps_client_reads_the_result(fake, agent):
    _live, rt = agent
    [entry] = [e for e in agent_registry.read_registry(rt) if e.pid == os.getpid()]
    result = agent_client.record(entry, 1, max_entries=2000)
    assert result.ok and result.pid == os.getpid() and result.entries == 9
    assert result.path is not None and os.path.exists(result.path)
    assert [s.site for s in result.sites][:2] == ["train.py:70 in step", "train.py:42 in step"]
    assert result.sites[1].live_bytes == 100 * MiB
    fake.history_enabled = True
    refused = agent_client.record(entry, 1)
    assert not refused.ok and refused.code == "refused"
    # a short timeout: the client gives up, the agent still turns it off at its deadline
    fake.history_enabled = False
    gave_up = agent_client.record(entry, 2, timeout_s=0.5)
    assert not gave_up.ok and gave_up.code == "timeout"
    deadline = time.monotonic() + 10
    while (fake.history_enabled or len(fake.history_calls) < 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.history_enabled is False and fake.history_calls[-1]["enabled"] is None


def test_the_connection_hears_record_started_once_the_history_is_on(fake, agent):
    live, rt = agent
    c = Client(live.server.address)
    c.send_raw(protocol.encode(protocol.request(7, "record", {"seconds": 1,
                                                              "max_entries": 2000})))
    herald = c.recv()
    assert herald == {"event": "record_started", "data": {"seconds": 1.0, "max_entries": 2000}}
    assert fake.history_enabled is True  # said once it was on, not before
    reply = c.recv()
    assert reply["id"] == 7 and reply["result"]["entries"] == 9
    c.close()
    # the app's client: told once it started; a refusal comes without it
    [entry] = [e for e in agent_registry.read_registry(rt) if e.pid == os.getpid()]
    started: list[bool] = []
    result = agent_client.record(entry, 1, on_started=lambda: started.append(
        fake.history_enabled))
    assert result.ok and started == [True]
    fake.history_enabled = True  # the process records its own history: refused
    started.clear()
    refused = agent_client.record(entry, 1, on_started=lambda: started.append(True))
    assert not refused.ok and refused.code == "refused" and started == []
