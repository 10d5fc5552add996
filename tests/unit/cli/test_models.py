"""The model manager's CLI: models, unload, reload, pin, policy (demo and a fake agent)."""

from __future__ import annotations

import json
import socket

import pytest

from app import cli
from tests.unit.cli.running import run_cli

NB, TRAIN = 18822, 20417  # the demo's notebook and training job
MODEL_KEYS = {"pid", "id", "name", "class", "group", "state", "offloaded_to", "pinned", "device",
              "home_device", "dtype", "training", "requires_grad", "training_evidence", "params",
              "param_bytes", "buffer_bytes", "placeholder_bytes", "bytes", "last_used",
              "first_seen", "idle_since", "idle_s", "blocker", "unload_blocker",
              "auto_unload_blocker", "idle_unload_s", "command", "kind"}
ACTION_KEYS = {"pid", "model", "ok", "error", "code", "pinned", "state", "target", "bytes_moved",
               "bytes_released", "seconds", "outcome", "note", "freed_bytes"}

needs_unix = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


# ------------------------------------------------------------------ demo


def test_models_demo_shows_the_pressure_policys_work(capsys):
    rc, out, _ = run_cli(capsys, "models", "--demo", "--json")
    assert rc == 0
    records = json.loads(out)
    assert records and all(set(r) == MODEL_KEYS for r in records)
    by_name = {r["name"]: r for r in records}
    # the demo's moment: GPU 0 crossed 90 % at ~32 s and the policy unloaded these
    assert by_name["pipe.unet"]["state"] == "offloaded"
    assert by_name["pipe.unet"]["offloaded_to"] == "cpu"
    assert by_name["pipe.unet"]["home_device"] == "cuda:0" and by_name["pipe.unet"]["device"] == "cpu"
    assert by_name["pipe.text_encoder"]["state"] == "offloaded"
    assert by_name["pipe.vae"]["state"] == "resident"
    assert by_name["pipe.vae"]["idle_s"] > 2 * 3600
    assert by_name["model"]["blocker"] == "train mode" and by_name["model"]["training"]
    assert by_name["model"]["training_evidence"] == "train mode"
    assert by_name["bert-base-uncased"]["idle_s"] < 1
    assert by_name["pipe.unet"]["bytes"] == 859_520_964 * 2
    # every model requires grad, like from_pretrained ones; the pipeline went anyway
    assert all(r["requires_grad"] is True for r in records)
    assert [by_name[n]["id"] for n in ("pipe.unet", "pipe.text_encoder", "pipe.vae")] == [
        "m1", "m2", "m3"]
    vae = by_name["pipe.vae"]
    assert vae["idle_since"] <= vae["last_used"] + 1e-6 and vae["first_seen"] < vae["idle_since"]
    rc, out, _ = run_cli(capsys, "--demo", "models")
    assert rc == 0
    assert "offloaded (cpu)" in out and "train mode" in out and "2 h 2" in out
    assert "UNet2DConditionModel" in out


def test_unload_reload_demo_and_exit_codes(capsys):
    rc, out, _ = run_cli(capsys, "unload", "--demo", "--pid", str(NB), "--model", "m3",
                         "--to", "disk", "--json")
    assert rc == 0
    data = json.loads(out)
    assert set(data) == ACTION_KEYS
    assert data["ok"] and data["state"] == "offloaded" and data["target"] == "disk"
    assert data["bytes_moved"] == 83_653_863 * 2 and data["seconds"] > 0.05
    rc, out, _ = run_cli(capsys, "reload", "--demo", "--pid", str(NB), "--model", "m1")
    assert rc == 0 and out.startswith(f"{NB} pipe.unet: resident again (from cpu): moved 1.6 GiB")
    # refused: exit 1, the agent's reason kept
    refusal = (f"{TRAIN} m1: unload refused: training evidence: train mode [refused]\n"
               "  --force unloads it anyway (it reloads on its next forward)\n")
    rc, out, err = run_cli(capsys, "unload", "--demo", "--pid", str(TRAIN), "--model", "m1",
                           "--json")
    data = json.loads(out)  # --json: the JSON on stdout, the same exit and line on stderr
    assert rc == 1 and data["code"] == "refused" and err == refusal
    assert data["error"] == "training evidence: train mode"
    rc, out, err = run_cli(capsys, "unload", "--demo", "--pid", str(TRAIN), "--model", "m1")
    assert rc == 1 and out == "" and err == refusal
    rc, out, _ = run_cli(capsys, "unload", "--demo", "--pid", str(TRAIN), "--model", "m1",
                         "--force")
    assert rc == 0 and "offloaded to cpu" in out
    rc, out, err = run_cli(capsys, "reload", "--demo", "--pid", str(NB), "--model", "m3")
    assert rc == 1 and out == ""  # resident: nothing to reload, in the agents' words
    assert err == f"{NB} m3: reload refused: not offloaded (it is resident) [refused]\n"
    # no such model / agent: exit 2
    rc, out, err = run_cli(capsys, "unload", "--demo", "--pid", str(NB), "--model", "nope")
    assert rc == 2 and out == "" and "not_found" in err
    rc, out, err = run_cli(capsys, "reload", "--demo", "--pid", "1843", "--model", "x", "--json")
    assert rc == 2 and json.loads(out)["code"] == "not_found" and "no agent" in err


def test_pin_and_policy_demo(capsys):
    rc, out, _ = run_cli(capsys, "pin", "--demo", "--pid", str(NB), "--model", "m3")
    assert rc == 0 and "pinned" in out
    rc, out, _ = run_cli(capsys, "pin", "--demo", "--pid", str(NB), "--model", "m3", "--off",
                         "--json")
    assert rc == 0 and json.loads(out)["pinned"] is False
    rc, out, _ = run_cli(capsys, "policy", "--demo", "--pid", str(TRAIN), "--idle-unload", "600")
    assert rc == 0 and "600 s" in out
    assert "GPU models" in out and "on the CPU stay where they are" in out
    rc, out, _ = run_cli(capsys, "policy", "--demo", "--pid", str(TRAIN), "--idle-unload", "off",
                         "--json")
    assert rc == 0 and json.loads(out) == {"pid": TRAIN, "ok": True, "idle_unload_s": None,
                                           "error": None, "code": None}
    with pytest.raises(SystemExit):
        cli.main(["policy", "--demo", "--pid", str(TRAIN), "--idle-unload", "soon"])
    assert run_cli(capsys, "policy", "--demo", "--pid", "1", "--idle-unload", "600")[0] == 2


# ------------------------------------------------------------------ a fake agent


@needs_unix
def test_models_of_a_real_agent(capsys, fake):
    rc, out, _ = run_cli(capsys, "models", "--json")
    assert rc == 0
    records = json.loads(out)
    assert [(r["pid"], r["id"], r["state"]) for r in records] == [
        (fake.pid, "m1", "resident"), (fake.pid, "m2", "resident")]
    assert 590 < records[1]["idle_s"] < 700 and records[1]["blocker"] is None
    assert records[1]["requires_grad"] is True  # an eval model that requires grad: no blocker
    assert records[0]["blocker"] == "train mode" and records[0]["training_evidence"] == "train mode"
    rc, out, _ = run_cli(capsys, "models")
    assert rc == 0 and "head" in out and "10 min 00 s" in out


@needs_unix
def test_models_prefer_the_unload_blocker_and_say_na_for_unknown(capsys, fake):
    fake.models[0].update(unload_blocker="torch.compile", auto_unload_blocker="train mode",
                          idle_since=None)
    for key in ("idle_since", "first_seen", "placeholder_bytes", "training_evidence"):
        del fake.models[1][key]  # an older agent's entry
    fake.models[1]["last_used"] = None
    rc, out, _ = run_cli(capsys, "models", "--json")
    m1, m2 = json.loads(out)
    assert m1["blocker"] == "torch.compile" and m1["auto_unload_blocker"] == "train mode"
    assert m1["idle_since"] is None and m1["idle_s"] is None and m1["last_used"] is not None
    assert [m2[k] for k in ("idle_since", "idle_s", "first_seen", "placeholder_bytes",
                            "training_evidence")] == [None] * 5
    rc, out, _ = run_cli(capsys, "models")
    lines = out.splitlines()
    assert "IDLE" in lines[0] and "BLOCKER" in lines[0]
    head = lines[0].index("IDLE")
    assert [line[head - 3:head + 4].strip() for line in lines[1:]] == ["n/a", "n/a"]
    assert lines[1].endswith("torch.compile") and "never" not in out


@needs_unix
def test_an_older_agents_idle_time_is_its_last_forward(capsys, fake):
    for key in ("idle_since", "first_seen", "placeholder_bytes", "training_evidence"):
        del fake.models[1][key]
    rc, out, _ = run_cli(capsys, "models", "--json")
    m2 = json.loads(out)[1]
    assert m2["idle_since"] == m2["last_used"] and 590 < m2["idle_s"] < 700


@needs_unix
def test_unload_reload_pin_policy_of_a_real_agent(capsys, fake):
    pid = str(fake.pid)
    rc, out, _ = run_cli(capsys, "unload", "--pid", pid, "--model", "m2", "--to", "disk", "--json")
    assert rc == 0 and json.loads(out)["state"] == "offloaded"
    assert fake.requests[-1] == ("unload", {"model": "m2", "to": "disk", "force": False})
    rc, out, _ = run_cli(capsys, "models", "--json")
    assert {r["id"]: r["state"] for r in json.loads(out)} == {"m1": "resident", "m2": "offloaded"}
    rc, out, _ = run_cli(capsys, "reload", "--pid", pid, "--model", "m2")
    assert rc == 0 and "resident again (from disk)" in out
    rc, out, err = run_cli(capsys, "unload", "--pid", pid, "--model", "m1")
    assert rc == 1 and out == "" and "refused" in err and "training evidence: train mode" in err
    assert "--force unloads it anyway" in err
    rc, out, _ = run_cli(capsys, "unload", "--pid", pid, "--model", "m1", "--force", "--json")
    assert rc == 0 and json.loads(out)["ok"]
    rc, out, _ = run_cli(capsys, "reload", "--pid", pid, "--model", "zz", "--json")
    assert rc == 2 and json.loads(out)["code"] == "not_found"
    assert run_cli(capsys, "pin", "--pid", pid, "--model", "m2")[0] == 0
    assert fake.models[1]["pinned"] is True
    rc, out, _ = run_cli(capsys, "policy", "--pid", pid, "--idle-unload", "300", "--json")
    assert rc == 0 and json.loads(out)["idle_unload_s"] == 300 and fake.idle_unload_s == 300
    assert run_cli(capsys, "unload", "--pid", "1", "--model", "m2")[0] == 2
    # without --to the agent chooses (cpu for a GPU model, disk for a CPU one)
    assert run_cli(capsys, "unload", "--pid", pid, "--model", "m2")[0] == 0  # pinned: by hand ok
    assert fake.requests[-1] == ("unload", {"model": "m2", "force": False})


@needs_unix
def test_a_hung_agent_fails_with_exit_1(capsys, fake):
    fake.hang = True
    rc, out, _ = run_cli(capsys, "unload", "--pid", str(fake.pid), "--model", "m2",
                         "--timeout", "0.3", "--json")
    assert rc == 1 and json.loads(out)["code"] == "timeout"


@needs_unix
@pytest.mark.parametrize("seconds", ["1e-300", "5", "-60", "nan", "inf", "1e999", "2592001"])
def test_policy_out_of_bounds_is_refused_before_anything_is_sent(capsys, fake, seconds):
    fake.idle_unload_s = 600.0
    with pytest.raises(SystemExit) as exit_:
        cli.main(["policy", "--pid", str(fake.pid), "--idle-unload", seconds])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert "--idle-unload" in err and "between 10 s and 30 days" in err
    assert not [method for method, _ in fake.requests if method == "set_policy"]
    assert fake.idle_unload_s == 600.0


@needs_unix
@pytest.mark.parametrize("seconds", ["10", "2592000"])
def test_policy_at_the_bounds_is_sent(capsys, fake, seconds):
    rc, out, _ = run_cli(capsys, "policy", "--pid", str(fake.pid), "--idle-unload", seconds,
                         "--json")
    assert rc == 0 and json.loads(out)["idle_unload_s"] == float(seconds)
    assert fake.requests[-1] == ("set_policy", {"idle_unload_s": float(seconds)})
