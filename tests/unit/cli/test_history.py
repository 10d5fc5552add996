"""``history``: stored samples as a table or JSON, from a database the
recorder wrote; a bad --since is refused; Qt and NVML never imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.store.recorder import HistoryRecorder
from tests.fakes.history_stream import GiB, MiB, pid_of, snapshot_at

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def state(tmp_path):
    """A state directory whose history holds 5 s of 2 GPUs (3 processes each,
    the last with unknown bytes), recorded a minute ago."""
    db = tmp_path / "history.sqlite3"
    recorder = HistoryRecorder(str(db))
    assert recorder.wait_ready()
    start = int(time.time()) - 60
    for i in range(10):
        recorder.observe(snapshot_at(start + i * 0.5, unknown_last=True))
    recorder.close()
    return tmp_path


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VRAM_STEWARD_STATE_DIR=str(state))
    code = ("import sys, app.cli as c; rc = c.main(sys.argv[1:]); "
            "bad = [m for m in ('PySide6', 'pynvml') if m in sys.modules]; "
            "print('IMPORTED', bad, file=sys.stderr) if bad else None; sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, "history", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_json_lists_every_stored_sample(state):
    result = _cli(state, "--json", "--since", "10m")
    assert result.returncode == 0, result.stderr
    assert "IMPORTED" not in result.stderr
    records = json.loads(result.stdout)
    assert len(records) == 2 * 5  # 2 GPUs, 5 seconds
    first = records[0]
    assert set(first) == {"timestamp", "time", "gpu_uuid", "gpu_index", "gpu_name",
                          "display_id", "memory_used", "memory_total", "utilization_gpu",
                          "processes"}
    assert first["gpu_uuid"] == "GPU-0" and first["gpu_index"] == 0
    assert first["memory_used"] == GiB and first["memory_total"] == 80 * GiB
    procs = first["processes"]
    assert [p["pid"] for p in procs] == [pid_of(0, p) for p in range(3)]
    assert procs[0]["gpu_memory"] == 100 * MiB and procs[0]["create_time"] == 1e9 + pid_of(0, 0)
    assert procs[2]["gpu_memory"] is None  # unknown is null, never 0
    assert [r["timestamp"] for r in records] == sorted(r["timestamp"] for r in records)


def test_filters_by_gpu_index_and_pid(state):
    records = json.loads(_cli(state, "--json", "--gpu", "1").stdout)
    assert {r["gpu_uuid"] for r in records} == {"GPU-1"} and len(records) == 5
    records = json.loads(_cli(state, "--json", "--pid", str(pid_of(0, 1))).stdout)
    assert {r["gpu_uuid"] for r in records} == {"GPU-0"} and len(records) == 5
    assert all([p["pid"] for p in r["processes"]] == [pid_of(0, 1)] for r in records)


def test_since_limits_the_range(state):
    assert json.loads(_cli(state, "--json", "--since", "30s").stdout) == []


def test_table_uses_the_byte_format_and_na(state):
    result = _cli(state, "--gpu", "0")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:5] == ["time", "gpu", "uuid", "used", "total"]
    assert len(lines) == 1 + 5
    assert "GPU-0" in lines[1] and "1.0 GiB" in lines[1] and "80.0 GiB" in lines[1]
    assert f"{pid_of(0, 0)} 100 MiB" in lines[1] and f"{pid_of(0, 2)} n/a" in lines[1]


@pytest.mark.parametrize("since", ["10", "1w", "-1h", "abc", "0m"])
def test_bad_since_is_refused_with_exit_2(state, since):
    result = _cli(state, "--since", since)
    assert result.returncode == 2
    assert "--since" in result.stderr and result.stdout == ""


def test_no_history_yet(tmp_path):
    result = _cli(tmp_path, "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == []
    assert not (tmp_path / "history.sqlite3").exists()


def test_unreadable_history_fails_clearly(tmp_path):
    (tmp_path / "history.sqlite3").write_bytes(b"garbage" * 100)
    result = _cli(tmp_path, "--json")
    assert result.returncode == 1 and "could not be read" in result.stderr
