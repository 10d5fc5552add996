"""The server's verbs: scopes, owners, bad input that changes nothing, the audit log."""

from __future__ import annotations

import logging
import os
import time

import pytest

from app.core.serve.access import ANONYMOUS, CONTROL, READ, Caller, own_user
from app.core.serve.api import ServerApi
from app.core.serve.params import ApiError
from app.core.wire.snapshot import WIRE_VERSION, decode_snapshot

USER, UID = own_user()
OWNER = Caller(USER, UID, frozenset({READ, CONTROL}), "http")
READER = Caller("dashboards", None, frozenset({READ}), "http")
NOBODY = Caller(ANONYMOUS, None, frozenset({READ}), "http")


def test_snapshot_is_the_engines_latest_in_the_wire_format(demo_engine):
    before = demo_engine.state().snapshot
    answer = ServerApi(demo_engine).call("snapshot", {}, READER)
    assert answer["wire"] == WIRE_VERSION
    snapshot = decode_snapshot(answer["result"])
    assert snapshot.agents and snapshot.gpus
    assert before.timestamp <= snapshot.timestamp <= demo_engine.state().snapshot.timestamp
    assert [g.uuid for g in snapshot.gpus] == [g.uuid for g in before.gpus]


def test_agents_are_listed_without_their_address_or_secret(demo_engine):
    items = ServerApi(demo_engine).call("agents", {}, READER)["result"]
    assert {i["entry"]["pid"] for i in items} == set(demo_engine.agents.reports())
    assert all(i["entry"]["address"] == "remote" and "token" not in i["entry"] for i in items)


def test_actions_need_the_control_scope_and_say_how_to_get_it(demo_engine):
    api = ServerApi(demo_engine)
    with pytest.raises(ApiError, match="no control scope") as info:
        api.call("free_cache", {"pid": 20417}, READER)
    assert info.value.status == 403
    with pytest.raises(ApiError, match="--token-file") as info:
        api.call("free_cache", {"pid": 20417}, NOBODY)
    assert info.value.status == 401
    with pytest.raises(ApiError) as info:
        api.call("format_disk", {}, OWNER)
    assert info.value.code == "unknown_method"


@pytest.mark.parametrize("params, error", [
    ({"pid": 20417, "model": "m1", "forse": True}, "unknown parameter 'forse'"),
    ({"pid": "20417", "model": "m1"}, "'pid' must be an integer"),
    ({"pid": 20417}, "'model' is required"),
    ({"pid": 20417, "model": "m1", "to": "tape"}, "'to' must be one of cpu, disk"),
    ({"pid": 20417, "model": "m1", "timeout_s": 1e9}, "'timeout_s' must be between"),
    ({"pid": 0, "model": "m1"}, "'pid' must be at least 1"),
    ([1, 2], "params must be a JSON object"),
])
def test_bad_input_is_refused_before_anything_is_sent(demo_engine, monkeypatch, params, error):
    sent = []
    monkeypatch.setattr(demo_engine.agents, "unload", lambda *a, **k: sent.append(a))
    with pytest.raises(ApiError, match=error) as info:
        ServerApi(demo_engine).call("unload", params, OWNER)
    assert info.value.code == "bad_request" and sent == []


def test_idle_timer_bounds_are_the_agents(demo_engine):
    with pytest.raises(ApiError, match="seconds"):
        ServerApi(demo_engine).call("set_idle_unload", {"pid": 18822, "seconds": 1.0}, OWNER)


def test_an_action_reaches_the_agent_and_is_logged_with_who_asked(demo_engine, caplog):
    caplog.set_level(logging.INFO, logger="app.serve.audit")
    before = demo_engine.agents.reports()[18822].devices[0]
    result = ServerApi(demo_engine).call("free_cache", {"pid": 18822}, OWNER)["result"]
    assert result["ok"] is True and result["pid"] == 18822
    assert result["freed"] == before.reserved - before.allocated > 0  # the notebook's idle cache
    (line,) = [r.getMessage() for r in caplog.records if r.name == "app.serve.audit"]
    assert f"{USER} (uid {UID}) via http: free_cache" in line and "18822" in line


def test_only_the_callers_own_processes_on_a_real_host(demo_engine, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="app.serve.audit")
    monkeypatch.setattr(demo_engine.collector.source, "name", "nvml")
    someone_else = ServerApi(demo_engine, owner_of=lambda pid: UID + 1)
    with pytest.raises(ApiError, match=f"not {USER}'s") as info:
        someone_else.call("free_cache", {"pid": 20417}, OWNER)
    assert info.value.code == "not_owned"
    assert "refused" in caplog.records[-1].getMessage()
    gone = ServerApi(demo_engine, owner_of=lambda pid: None)
    with pytest.raises(ApiError, match="no process 20417") as info:
        gone.call("free_cache", {"pid": 20417}, OWNER)
    mine = ServerApi(demo_engine, owner_of=lambda pid: UID)
    assert mine.call("free_cache", {"pid": 20417}, OWNER)["result"]["ok"]
    # A read-only token's label is no user of this host: it controls nothing.
    labelled = Caller("dashboards", None, frozenset({READ, CONTROL}), "http")
    with pytest.raises(ApiError, match="not dashboards's"):
        mine.call("free_cache", {"pid": 20417}, labelled)


def test_terminate_refuses_simulated_processes(demo_engine):
    with pytest.raises(ApiError, match="simulated") as info:
        ServerApi(demo_engine).call("terminate", {"pid": 20417}, OWNER)
    assert info.value.code == "refused"


def test_doctor_answers_the_snapshots_diagnoses(demo_engine):
    result = ServerApi(demo_engine).call("doctor", {}, READER)["result"]
    kinds = {d["kind"] for d in result["diagnoses"]}
    assert kinds == {d.kind for d in demo_engine.state().snapshot.diagnoses} - {"oom"}
    assert result["oom_reports"] == []


def test_history_of_a_server_that_keeps_none(demo_engine):
    with pytest.raises(ApiError) as info:
        ServerApi(demo_engine).call("history", {"since_s": 60}, READER)
    assert info.value.code == "no_history"


def test_history_answers_what_history_json_prints(demo_engine, tmp_path):
    from app.core.store.query import read_history
    from app.core.store.recorder import HistoryRecorder
    from app.core.store.records import history_records

    path = str(tmp_path / "history.sqlite3")
    recorder = HistoryRecorder(path, sources=None)
    seq = 0
    for _ in range(8):
        state = demo_engine.wait_newer(seq, 5.0)
        seq = state.seq
        recorder.observe(state.snapshot)
    recorder.close()
    api = ServerApi(demo_engine, history_path=path)
    answer = api.call("history", {"since_s": 3600, "gpu": 0}, READER)["result"]
    expected = history_records(read_history(path, time.time() - 3600), 0, None)
    assert answer == expected and answer
    assert os.path.exists(path)
    with pytest.raises(ApiError, match="since_s"):
        api.call("history", {"since_s": -1}, READER)


def test_terminate_signals_the_callers_own_process_and_only_that(demo_engine, monkeypatch):
    import subprocess
    import sys

    import psutil

    from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        demo_engine.stop()  # the state stays what this test publishes
        monkeypatch.setattr(demo_engine.collector.source, "name", "nvml")
        created = psutil.Process(child.pid).create_time()
        row = ProcessSample(child.pid, 64 << 20, name="python", user=USER, create_time=created)
        demo_engine._publish(Snapshot(time.time(), time.monotonic(), "nvml", None, (
            GpuSample(0, "GPU", "GPU-0", 1 << 30, 64 << 20, None, processes=(row,)),)))
        other = ServerApi(demo_engine, owner_of=lambda pid: UID + 1)
        with pytest.raises(ApiError, match="only your own"):
            other.call("terminate", {"pid": child.pid}, OWNER)
        assert child.poll() is None  # refused: nothing was sent
        result = ServerApi(demo_engine).call(
            "terminate", {"pid": child.pid, "create_time": created, "grace_s": 5}, OWNER)
        assert result["result"]["outcome"] == "exited" and child.wait(5) == -15
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
