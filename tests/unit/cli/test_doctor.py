"""``doctor``: the demo's findings as JSON, stored OOM reports, bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.core.diagnosis.report_store import ReportStore
from app.core.diagnosis.types import Fix, Holder, OomReport

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def run_main(*args: str, state_dir: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VRAM_STEWARD_STATE_DIR=state_dir)
    return subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def demo_json(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("state"))
    done = run_main("doctor", "--demo", "--json", state_dir=state)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), state


def test_demo_json_shows_the_leak_full_soon_before_the_oom_and_the_post_mortem(demo_json):
    data, state = demo_json
    kinds = {d["kind"] for d in data["diagnoses"]}
    assert {"leak", "full_soon", "oom"} <= kinds
    leak = next(d for d in data["diagnoses"] if d["kind"] == "leak")
    assert "serve_embeddings.py" in leak["command"] and leak["figures"]["rate_bytes_per_s"] > 0
    (report,) = data["oom_reports"]
    first_alert = data["alerts"][0]
    assert first_alert["kind"] == "full_soon"
    assert first_alert["fired_at_s"] < report["time_s"] <= data["simulated_s"]
    assert first_alert["fired_at"] < report["time"]
    assert report["verdict"] == "live_tensors" and report["demo"] is True
    assert report["explanation"][0].startswith("python serve_embeddings.py")
    assert report["fixes"][0]["action"] == "fix_leak"
    assert any(h["is_oom_process"] for h in report["holders"])
    assert not os.listdir(state)  # the demo's reports are not saved


def test_demo_pid_filter_keeps_that_process_only(tmp_path, demo_json):
    everything, _ = demo_json
    done = run_main("doctor", "--demo", "--json", "--pid", "23890", state_dir=str(tmp_path))
    data = json.loads(done.stdout)
    assert data["diagnoses"] and all(d["pid"] == 23890 for d in data["diagnoses"])
    assert [r["pid"] for r in data["oom_reports"]] == [23890]
    assert data["alerts"] and all(a["pid"] == 23890 for a in data["alerts"])
    # the training job on GPU 0: nothing of GPU 1's (nor of the notebook beside it)
    other = json.loads(run_main("doctor", "--demo", "--json", "--pid", "20417",
                                state_dir=str(tmp_path)).stdout)
    assert all(d["pid"] == 20417 for d in other["diagnoses"])
    assert other["alerts"] == [] and other["oom_reports"] == []
    text = run_main("doctor", "--demo", "--pid", "20417", state_dir=str(tmp_path)).stdout
    assert "GPU 1" not in text and "Alerts fired" not in text and "OOM" not in text
    assert {a["pid"] for a in everything["alerts"]} == {23890}


def _report(when: float, pid: int) -> OomReport:
    return OomReport(f"{int(when * 1000):013d}-{pid}-1", when, pid, "python t.py", "0", "GPU-x",
                     "H100", 80 * 2**30, 79 * 2**30, 2**31, "other_processes",
                     ("python t.py asked for 2.0 GiB; 1.0 GiB was free on the card.",),
                     (Fix("stop_process", "Stop python x.py (pid 3): gives 9.0 GiB",
                          9 * 2**30, 3),),
                     (Holder(pid, "python t.py", "me", 20 * 2**30, True, True, None, None),),
                     {"seq": 1})


def test_oom_lists_stored_reports_newest_first(tmp_path):
    store = ReportStore(os.path.join(str(tmp_path), "oom-reports"))
    older, newer = _report(1_700_000_000.0, 11), _report(1_700_000_500.0, 12)
    store.save(older)
    store.save(newer)
    done = run_main("doctor", "--oom", "--json", state_dir=str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [r["id"] for r in data["oom_reports"]] == [newer.id, older.id]
    assert data["oom_reports"][0] == newer.to_json()
    text = run_main("doctor", "--oom", "--pid", "11", state_dir=str(tmp_path)).stdout
    assert "python t.py ran out of GPU memory asking for 2.0 GiB" in text and newer.id not in text


@pytest.mark.parametrize("args", [("doctor", "--pid", "abc"), ("doctor", "--pid", "0"),
                                  ("doctor", "--bogus")])
def test_bad_arguments_exit_2(tmp_path, args):
    done = run_main(*args, state_dir=str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip()


def test_live_doctor_answers_without_a_gpu_and_lists_stored_reports(tmp_path):
    ReportStore(os.path.join(str(tmp_path), "oom-reports")).save(_report(1_700_000_000.0, 11))
    done = run_main("doctor", "--json", state_dir=str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data["diagnoses"], list)
    assert [r["pid"] for r in data["oom_reports"]] == [11]
    if data["error"]:  # no NVML here: said plainly, not a crash
        assert data["notes"] and "stored reports" in data["notes"][0]
