"""One demo, one story: every one-shot ``--demo`` command shows the demo at the
same moment, so their pids, figures, model states and findings agree."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from app import cli


def run_json(capsys, *argv: str):
    rc = cli.main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def run_quiet(*argv: str):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main([*argv, "--json"])
    assert rc == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def story():
    """Each command's JSON, each run as its own command (a replay of its own)."""
    return {"status": run_quiet("status", "--demo"), "agents": run_quiet("agents", "--demo"),
            "models": run_quiet("models", "--demo"), "doctor": run_quiet("doctor", "--demo"),
            "oom": run_quiet("doctor", "--oom", "--demo")}


def status_processes(status):
    return {p["pid"]: (g["index"], p) for g in status["gpus"] for p in g["processes"]}


def test_the_same_processes_everywhere(story):
    running = status_processes(story["status"])
    agents = {a["pid"]: a for a in story["agents"]}
    assert agents and set(agents) <= set(running)
    assert {m["pid"] for m in story["models"]} == set(agents)
    assert set(map(int, story["status"]["agents"])) == set(agents)
    for pid, agent in agents.items():
        gpu, proc = running[pid]
        assert " ".join(agent["argv"]) == proc["command"]
        assert [d["index"] for d in agent["devices"]] == [gpu]
        (device,) = agent["devices"]
        # the allocator's reserved bytes are inside the process's NVML figure
        assert 0 < device["reserved"] <= proc["gpu_memory"]
        assert device == {k: v for k, v in story["status"]["agents"][str(pid)]["devices"][0]
                          .items() if k in device}


def test_the_same_model_states_everywhere(story):
    from_agents = {(a["pid"], m["id"]): (m["name"], m["state"], m["device"])
                   for a in story["agents"] for m in a["models"]}
    from_models = {(m["pid"], m["id"]): (m["name"], m["state"], m["device"])
                   for m in story["models"]}
    from_status = {(int(pid), m["id"]): (m["name"], m["state"], m["device"])
                   for pid, a in story["status"]["agents"].items() for m in a["models"]}
    assert from_agents == from_models == from_status
    assert any(state == "offloaded" for _, state, _ in from_models.values())


def test_the_doctor_advises_only_what_the_models_say(story):
    states = {(m["pid"], m["id"]): m["state"] for m in story["models"]}
    advised = {(f["pid"], f["model"]) for d in story["doctor"]["diagnoses"] for f in d["fixes"]
               if f["action"] == "unload_model"}
    assert advised, "an idle resident model is advised"
    assert all(states[key] == "resident" for key in advised)
    idle = next(d for d in story["doctor"]["diagnoses"] if d["kind"] == "idle_model")
    offloaded = {m["name"] for m in story["models"] if m["state"] == "offloaded"}
    assert offloaded and not any(name in line for name in offloaded for line in idle["evidence"])


def test_every_pid_the_doctor_names_is_running(story):
    running = set(status_processes(story["status"]))
    doctor = story["doctor"]
    named = {d["pid"] for d in doctor["diagnoses"] if d["pid"] is not None}
    named |= {f["pid"] for d in doctor["diagnoses"] for f in d["fixes"] if f["pid"] is not None}
    named |= {h["pid"] for r in doctor["oom_reports"] for h in r["holders"]}
    named |= {a["pid"] for a in doctor["alerts"] if a["pid"] is not None}
    assert named and named <= running


def test_doctor_oom_demo_shows_the_demos_report(story):
    def comparable(report):  # less the wall-clock times: each command's demo starts its own
        capture = {k: v for k, v in report["capture"].items() if k != "time"}
        return {**{k: v for k, v in report.items() if k not in ("id", "time")},
                "capture": capture}

    assert story["oom"]["source"] == "demo"
    assert story["oom"]["oom_reports"] and [comparable(r) for r in story["oom"]["oom_reports"]] \
        == [comparable(r) for r in story["doctor"]["oom_reports"]]
    assert all(r["demo"] is True for r in story["oom"]["oom_reports"])


def test_doctor_oom_demo_in_words_and_filtered(capsys):
    rc = cli.main(["doctor", "--oom", "--demo"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "ran out of GPU memory" in out and "[verdict: live_tensors]" in out
    pid = run_json(capsys, "doctor", "--oom", "--demo")["oom_reports"][0]["pid"]
    others = run_json(capsys, "doctor", "--oom", "--demo", "--pid", str(pid + 1))
    assert others["oom_reports"] == []
    rc = cli.main(["doctor", "--oom", "--demo", "--pid", str(pid + 1)])
    assert rc == 0 and "No OOM reports in the demo" in capsys.readouterr().out


@pytest.mark.parametrize("size, gpus, per_gpu", [("3x5", 3, 5), ("8x64", 8, 64)])
def test_a_scaled_demo_shows_p_processes_per_gpu(capsys, size, gpus, per_gpu):
    status = run_json(capsys, "status", f"--demo={size}")
    assert [len(g["processes"]) for g in status["gpus"]] == [per_gpu] * gpus
    assert run_json(capsys, "agents", f"--demo={size}") == []
    doctor = run_json(capsys, "doctor", f"--demo={size}")
    assert doctor["simulated_s"] == 0 and doctor["oom_reports"] == []
