"""The OOM report store: real files, private modes, newest first, bounded, corrupt skipped."""

from __future__ import annotations

import json
import os
import stat

import pytest

from app.core.diagnosis.report_store import ReportStore
from app.core.diagnosis.types import Fix, Holder, OomReport


def report(when: float, pid: int = 7, seq: int = 1) -> OomReport:
    return OomReport(f"{int(when * 1000):013d}-{pid}-{seq}", when, pid, "python t.py", "0",
                     "GPU-x", "H100", 80 * 2**30, 79 * 2**30, 2**31, "fragmentation",
                     ("python t.py asked for 2.0 GiB.",),
                     (Fix("expandable_segments", "restart with it", 3 * 2**30, pid),),
                     (Holder(pid, "python t.py", "me", 20 * 2**30, True, True, 1, 2),),
                     {"seq": seq, "time": when})


def test_round_trip_modes_and_newest_first(tmp_path):
    store = ReportStore(str(tmp_path / "oom-reports"))
    first = report(1_700_000_000.0)
    second = report(1_700_000_100.5, pid=8)
    path = store.save(first)
    store.save(second)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.directory).st_mode) == 0o700
    assert store.list() == [second, first]
    assert store.load(first.id) == first
    assert store.list(pid=7) == [first]
    assert store.exists(second.id) and not store.exists("0000000000000-1-1")
    assert not [n for n in os.listdir(store.directory) if n.endswith(".tmp")]


def test_a_corrupt_or_foreign_file_is_skipped(tmp_path):
    store = ReportStore(str(tmp_path))
    good = report(1_700_000_000.0)
    store.save(good)
    (tmp_path / "1700000000500-9-1.json").write_text("{not json")
    (tmp_path / "1700000000600-9-2.json").write_text('{"id": 3}')
    (tmp_path / "notes.txt").write_text("hello")
    assert store.list() == [good]


def test_only_the_newest_are_kept(tmp_path):
    store = ReportStore(str(tmp_path), keep=5)
    for i in range(8):
        store.save(report(1_700_000_000.0 + i, seq=i))
    kept = store.list()
    assert [r.capture["seq"] for r in kept] == [7, 6, 5, 4, 3]
    assert len(os.listdir(tmp_path)) == 5


def test_a_missing_directory_lists_nothing(tmp_path):
    assert ReportStore(str(tmp_path / "absent")).list() == []


def test_nothing_is_written_or_read_in_a_folder_others_can_reach(tmp_path):
    from app.agent.paths import UnsafeDir

    shared = tmp_path / "oom-reports"
    shared.mkdir()
    os.chmod(shared, 0o777)
    planted = report(1_700_000_000.0)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    os.symlink(mine, shared / f".{planted.id}.{os.getpid()}.tmp")
    (shared / f"{planted.id}.json").write_text(json.dumps(planted.to_json()))
    store = ReportStore(str(shared))
    with pytest.raises(UnsafeDir, match="group/others"):
        store.save(report(1_700_000_100.0))
    assert mine.read_text() == "mine\n"
    assert store.list() == [] and store.load(planted.id) is None
    assert not store.exists(planted.id)


def test_the_default_folder_needs_a_private_state_dir(tmp_path, monkeypatch):
    from app.agent.paths import UnsafeDir

    state = tmp_path / "state"
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(state))
    path = ReportStore().save(report(1_700_000_000.0))
    assert os.path.dirname(path) == str(state / "oom-reports")
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    os.chmod(state, 0o775)
    assert ReportStore().list() == []
    with pytest.raises(UnsafeDir):
        ReportStore().save(report(1_700_000_100.0))
