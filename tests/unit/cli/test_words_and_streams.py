"""Where the CLI's words go and what they say: results on stdout, refusals on
stderr with a status other than 0 (``--json``: the JSON on stdout all the
same), one wording for a refused reload whoever answers, and a command's
bad flag answered with that command's usage."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import cli
from app.agent import protocol
from tests.fakes.fake_agent import FakeAgent
from tests.unit.cli.running import run_cli

ROOT = Path(__file__).resolve().parents[3]
needs_unix = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


def a_resident_demo_model(capsys) -> tuple[int, str]:
    """(pid, model id) of a model the demo's agents hold resident now."""
    rc, out, _ = run_cli(capsys, "models", "--demo", "--json")
    assert rc == 0
    return next((r["pid"], r["id"]) for r in json.loads(out)
                if r["kind"] == "agent" and r["state"] == "resident")


def an_older_agents_reload(fake: FakeAgent) -> None:
    """The fake answers a reload of a resident model as agents before this one did."""
    answer = fake._answer

    def older(rid, method, params):
        model = next((m for m in fake.models if m["id"] == params.get("model")), None)
        if method != "reload" or model is None or model["state"] != "resident":
            return answer(rid, method, params)
        return protocol.result(rid, {
            "seq": 1, "time": time.time(), "model": model["id"], "name": model["name"],
            "action": "reload", "state": "resident", "target": None, "bytes_moved": 0,
            "bytes_released": 0, "seconds": 0.0, "reason": "manual", "ok": True,
            "error": None, "note": "already resident"})

    fake._answer = older


# --------------------------------------------------- a resident model's reload


@needs_unix
def test_a_resident_models_reload_is_refused_in_one_wording_whoever_answers(capsys, fake):
    pid, model = a_resident_demo_model(capsys)
    answers = {}
    rc, out, err = run_cli(capsys, "reload", "--demo", "--pid", str(pid), "--model", model)
    answers["demo"] = (rc, out, err.removeprefix(f"{pid} {model}: "))
    rc, out, err = run_cli(capsys, "reload", "--pid", str(fake.pid), "--model", "m2")
    answers["agent"] = (rc, out, err.removeprefix(f"{fake.pid} m2: "))
    an_older_agents_reload(fake)
    rc, out, err = run_cli(capsys, "reload", "--pid", str(fake.pid), "--model", "m2")
    answers["older agent"] = (rc, out, err.removeprefix(f"{fake.pid} m2: "))
    assert fake.requests[-1] == ("reload", {"model": "m2"})
    expected = (1, "", "reload refused: not offloaded (it is resident) [refused]\n")
    assert answers == {"demo": expected, "agent": expected, "older agent": expected}


@needs_unix
def test_a_resident_models_reload_in_json_is_the_same_refusal(capsys, fake):
    pid, model = a_resident_demo_model(capsys)
    an_older_agents_reload(fake)
    replies = []
    for argv in (["--demo", "--pid", str(pid), "--model", model],
                 ["--pid", str(fake.pid), "--model", "m2"]):
        rc, out, err = run_cli(capsys, "reload", *argv, "--json")
        data = json.loads(out)
        assert rc == 1 and err.endswith(": reload refused: not offloaded (it is resident) "
                                        "[refused]\n")
        replies.append((data["ok"], data["code"], data["error"], data["target"]))
    assert replies == [(False, "refused", "not offloaded (it is resident)", None)] * 2


@needs_unix
def test_a_reload_done_says_where_from_and_never_from_nothing(capsys, fake):
    rc, out, _ = run_cli(capsys, "unload", "--pid", str(fake.pid), "--model", "m2")
    assert rc == 0 and out.startswith(f"{fake.pid} head: offloaded to cpu: moved ")
    rc, out, err = run_cli(capsys, "reload", "--pid", str(fake.pid), "--model", "m2")
    assert rc == 0 and err == "" and out.startswith(f"{fake.pid} head: resident again (from "
                                                    "cpu): moved ")


# --------------------------------------------------------------- streams


def test_a_refusal_goes_to_stderr_and_the_json_to_stdout(capsys):
    pid, _ = a_resident_demo_model(capsys)
    rc, out, err = run_cli(capsys, "pin", "--demo", "--pid", str(pid), "--model", "nope")
    assert rc == 2 and out == "" and err.startswith(f"{pid} nope: pin failed: ")
    assert err.rstrip().endswith("[not_found]")
    rc, out, err_json = run_cli(capsys, "pin", "--demo", "--pid", str(pid), "--model", "nope",
                                "--json")
    assert rc == 2 and json.loads(out)["code"] == "not_found" and err_json == err


@needs_unix
def test_a_failed_policy_goes_to_stderr(capsys, runtime):
    agent = FakeAgent(sock_dir=runtime)  # no model manager: set_policy is unknown to it
    agent.register(runtime)
    try:
        rc, out, err = run_cli(capsys, "policy", "--pid", str(agent.pid), "--idle-unload", "60")
        assert rc == 1 and out == ""
        assert err.startswith(f"{agent.pid}: policy failed: ") and "[unknown_method]" in err
        rc, out, err_json = run_cli(capsys, "policy", "--pid", str(agent.pid),
                                    "--idle-unload", "60", "--json")
        assert rc == 1 and json.loads(out)["ok"] is False and err_json == err
    finally:
        agent.close()


def test_a_done_action_says_nothing_on_stderr(capsys):
    pid, model = a_resident_demo_model(capsys)
    rc, out, err = run_cli(capsys, "pin", "--demo", "--pid", str(pid), "--model", model)
    assert rc == 0 and err == "" and out.startswith(f"{pid} {model}: pinned")


# ---------------------------------------------------------- bad flags

#: What each command needs besides the bad flag, so the flag is what is wrong.
NEEDS = {"agent": ["status"], "free-cache": ["--all"], "server-key": ["ollama"],
         "unload": ["--pid", "1", "--model", "m1"], "reload": ["--pid", "1", "--model", "m1"],
         "pin": ["--pid", "1", "--model", "m1"], "policy": ["--pid", "1", "--idle-unload", "off"],
         "record": ["--pid", "1", "--seconds", "1"]}


def test_every_command_is_tried_with_a_bad_flag():
    assert set(cli._commands(cli.build_parser())) >= set(NEEDS)


@pytest.mark.parametrize("command", sorted(cli._commands(cli.build_parser())))
def test_a_commands_bad_flag_prints_that_commands_usage(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, *NEEDS.get(command, []), "--no-such-flag"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.startswith(f"usage: vram-steward {command} ")
    assert err.splitlines()[-1] == (f"vram-steward {command}: error: unrecognized arguments: "
                                    "--no-such-flag")


def test_a_bad_flag_before_the_command_is_the_top_levels(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--no-such-flag", "status"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: vram-steward [")
    assert err.splitlines()[-1] == "vram-steward: error: unrecognized arguments: --no-such-flag"


def test_status_bogus_from_the_shell():
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), "status", "--bogus"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: vram-steward status ")
    assert done.stderr.splitlines()[-1] == ("vram-steward status: error: unrecognized "
                                            "arguments: --bogus")


# ------------------------------------------------------------ unknowns


@needs_unix
def test_a_model_whose_device_and_dtype_are_unknown_reads_na(capsys, fake):
    fake.models[1].update(device=None, dtype=None, home_device=None)
    rc, out, _ = run_cli(capsys, "models")
    row = next(line for line in out.splitlines() if " head " in line)
    assert rc == 0 and row.split()[6:8] == ["n/a", "n/a"]  # DEVICE and HOME
    rc, out, _ = run_cli(capsys, "agents")
    line = next(line for line in out.splitlines() if "- head (Head)" in line)
    assert rc == 0 and line.endswith(", n/a, n/a, eval")
