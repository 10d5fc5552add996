"""The history's files are private: the database, its ``-wal`` and ``-shm``
and the writer's lock come out 0600 whatever the umask, are never opened
through a link, and nothing is written in a folder that is not private."""

from __future__ import annotations

import os
import stat
import time

from app.core.store.query import read_history
from app.core.store.recorder import HistoryRecorder
from tests.fakes.history_stream import snapshot_at


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_database_wal_shm_and_lock_are_0600_under_a_loose_umask(tmp_path):
    db = tmp_path / "history.sqlite3"
    old = os.umask(0o022)
    try:
        recorder = HistoryRecorder(str(db))
        assert recorder.wait_ready()
        recorder.observe(snapshot_at(1_700_000_000.0))
        time.sleep(1.5)  # a commit: the -wal and -shm exist while the writer is open
        names = {p.name: _mode(p) for p in tmp_path.iterdir()}
        recorder.close()
    finally:
        os.umask(old)
    assert names == {"history.sqlite3": 0o600, "history.sqlite3-wal": 0o600,
                     "history.sqlite3-shm": 0o600, "history.sqlite3.lock": 0o600}


def test_an_own_database_of_an_older_version_is_tightened(tmp_path):
    db = tmp_path / "history.sqlite3"
    recorder = HistoryRecorder(str(db))
    assert recorder.wait_ready()
    recorder.close()
    for path in tmp_path.iterdir():
        os.chmod(path, 0o644)
    recorder = HistoryRecorder(str(db))
    assert recorder.wait_ready()
    recorder.close()
    assert {_mode(p) for p in tmp_path.iterdir()} == {0o600}


def test_links_beside_the_database_are_never_followed(tmp_path):
    db = tmp_path / "history.sqlite3"
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "history.sqlite3-wal").symlink_to(target / "wal")
    recorder = HistoryRecorder(str(db))
    assert not recorder.wait_ready()
    recorder.close()
    assert "history.sqlite3-wal" in (recorder.message or "")
    assert list(target.iterdir()) == []
    for name in ("history.sqlite3-wal", "history.sqlite3.lock"):
        os.unlink(tmp_path / name)
    (tmp_path / "history.sqlite3.lock").symlink_to(target / "lock")
    recorder = HistoryRecorder(str(db))
    assert not recorder.wait_ready()
    recorder.close()
    assert list(target.iterdir()) == []


def test_nothing_is_written_or_read_in_a_folder_others_can_reach(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    recorder = HistoryRecorder(str(shared / "history.sqlite3"))
    assert not recorder.wait_ready()
    recorder.close()
    assert "is open to group/others (mode 777)" in (recorder.message or "")
    assert list(shared.iterdir()) == []
    (shared / "history.sqlite3").write_bytes(b"")  # planted
    stored = read_history(str(shared / "history.sqlite3"), 0.0)
    assert stored.empty and "is open to group/others" in (stored.error or "")
