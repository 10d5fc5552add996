"""``record``'s command line contract, against a fake agent over a real socket."""

from __future__ import annotations

import json
import socket

import pytest

from app import cli
from tests.fakes.recording_agent import RecordingAgent
from tests.unit.cli.running import run_cli

pytestmark = [pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX"),
              pytest.mark.usefixtures("runtime")]
RESULT_KEYS = {"pid", "ok", "path", "entries", "seconds", "device", "truncated", "sites",
               "error", "code"}


@pytest.fixture
def agent(runtime):
    fake = RecordingAgent(sock_dir=runtime)
    fake.register(runtime)
    yield fake
    fake.close()


def test_record_prints_the_file_and_the_top_sites(capsys, agent):
    rc, out, err = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "5",
                           "--max-entries", "2000")
    assert rc == 0
    assert agent.requests[-1] == ("record", {"seconds": 5.0, "max_entries": 2000})
    assert f"{agent.pid}: recorded 48.2 K allocation events in 5.0 s" in out
    assert "snapshot: /state/recordings/123-20250101-120000-000.pickle" in out
    assert "open it at https://pytorch.org/memory_viz" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "SITE" in line)
    assert lines[header].split() == ["ALLOCATED", "COUNT", "STILL", "LIVE", "SITE"]
    assert lines[header + 1].split() == ["3.0", "GiB", "120", "512", "MiB",
                                         "train.py:42", "in", "step"]
    assert lines[header + 2].split() == ["700", "MiB", "4.0", "K", "0", "B",
                                         "model.py:88", "in", "forward"]
    assert err == f"{agent.pid}: recording for 5 s…\n"  # the agent said it had started


def test_recording_is_said_only_once_the_agent_has_started_it(capsys, agent):
    agent.heralds = False  # an older agent: it never says so, the result alone is told
    rc, out, err = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "5")
    assert rc == 0 and "recorded 48.2 K allocation events" in out and err == ""
    agent.heralds = True
    rc, out, err = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "5",
                           "--json")
    assert rc == 0 and json.loads(out)["ok"] and err == ""  # --json: only the JSON


def test_record_json(capsys, agent):
    agent.reply["truncated"] = True
    rc, out, _ = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "1", "--json")
    assert rc == 0
    data = json.loads(out)
    assert set(data) == RESULT_KEYS and data["ok"] is True and data["truncated"] is True
    assert data["sites"][0] == {"site": "train.py:42 in step", "bytes": 3 << 30, "count": 120,
                                "live_bytes": 512 << 20}
    assert agent.requests[-1] == ("record", {"seconds": 1.0})


def test_truncated_is_said_in_words(capsys, agent):
    agent.reply["truncated"] = True
    _rc, out, _ = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "1")
    assert "the entry limit was reached: the oldest were dropped" in out


@pytest.mark.parametrize("code", ["refused", "busy", "failed"])
def test_refused_or_failed_exits_1_on_stderr_and_never_says_recording(capsys, agent, code):
    agent.error = (code, "CUDA only: this process has not initialised CUDA")
    rc, out, err = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "1")
    assert rc == 1 and out == ""
    verb = "refused" if code == "refused" else "failed"
    line = (f"{agent.pid}: record {verb}: CUDA only: this process has not initialised CUDA "
            f"[{code}]\n")
    assert err == line
    rc, out, err = run_cli(capsys, "record", "--pid", str(agent.pid), "--seconds", "1", "--json")
    data = json.loads(out)
    assert rc == 1 and data["ok"] is False and data["code"] == code and err == line


def test_no_agent_exits_2(capsys, agent):
    rc, out, err = run_cli(capsys, "record", "--pid", "999999999", "--seconds", "1", "--json")
    assert rc == 2
    assert json.loads(out) == {"pid": 999999999, "ok": False, "error": "no agent in that process",
                               "code": "not_found"}
    assert "no agent in process 999999999" in err
    rc, out, err = run_cli(capsys, "record", "--pid", "999999999", "--seconds", "1")
    assert rc == 2 and out == ""


@pytest.mark.parametrize("argv", [["--seconds", "0"], ["--seconds", "301"],
                                  ["--seconds", "x"], ["--seconds", "5", "--max-entries", "10"],
                                  ["--seconds", "5", "--max-entries", "1e6"], []])
def test_bad_arguments_exit_2_and_ask_nothing(capsys, agent, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(["record", "--pid", str(agent.pid), *argv])
    assert exc.value.code == 2
    assert [m for m, _ in agent.requests if m == "record"] == []


def test_the_demo_directory_says_what_it_cannot_do(capsys):
    rc, out, _ = run_cli(capsys, "record", "--demo", "--pid", "20417", "--seconds", "1",
                         "--json")
    data = json.loads(out)
    assert rc in (0, 1) and data["pid"] == 20417 and set(data) == RESULT_KEYS
