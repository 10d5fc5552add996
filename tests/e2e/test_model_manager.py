"""End to end: the model manager on a real child under ``main.py run`` (CPU torch).

``unload --to disk`` of the child's eval model, then ``reload``: the child's
outputs (it prints checksums on request) are bit-identical; ``models --json``
shows the states change; a training-mode model is refused without ``--force``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.e2e.test_run_agent import ROOT, Child, children, env, runtime  # noqa: F401 (fixtures)

RUNTIME_PY = ROOT / "app" / "agent" / "runtime.py"


def _agent_has_model_manager() -> bool:
    try:
        runtime_text = RUNTIME_PY.read_text()
        manager_text = (ROOT / "app" / "agent" / "manager.py").read_text()
    except OSError:
        return False
    return "def handle_unload" in manager_text and (
        '"unload"' in runtime_text or "handle_unload" in runtime_text)


pytestmark = [
    pytest.mark.skipif(not _agent_has_model_manager(),
                       reason="the agent side of the model manager (unload/reload handlers in "
                              "app/agent/runtime.py, app/agent/manager.py) is not there yet"),
    pytest.mark.skipif(os.name != "posix", reason="POSIX: AF_UNIX agents"),
]

CHILD = textwrap.dedent("""
    import hashlib, json, os, sys, time
    import torch

    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                  torch.nn.LayerNorm(256), torch.nn.Linear(256, 16)).eval()
    for p in encoder.parameters():
        p.requires_grad_(False)
    trainee = torch.nn.Linear(16, 4)  # training mode, requires grad
    x = torch.randn(8, 64)

    def checksum():
        with torch.no_grad():
            out = encoder(x)
        return {"sum": float(out.double().sum()),
                "sha": hashlib.sha256(out.numpy().tobytes()).hexdigest()}

    print(json.dumps({"pid": os.getpid()}), flush=True)
    stop, ask = sys.argv[1], sys.argv[1] + ".ask"
    deadline = time.monotonic() + 120
    n = 0
    while not os.path.exists(stop) and time.monotonic() < deadline:
        if os.path.exists(ask + str(n + 1)):  # a forward of each model, on request only
            n += 1
            trainee(torch.randn(2, 16)).sum().backward()  # training mode, requires grad
            print(json.dumps({"n": n, **checksum()}), flush=True)
        time.sleep(0.02)
""")


def cli(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def models_of(env: dict, pid: int) -> dict[str, dict]:
    done = cli(env, "models", "--json", "--timeout", "5")
    assert done.returncode == 0, done.stderr
    return {m["class"].rsplit(".", 1)[-1]: m for m in json.loads(done.stdout) if m["pid"] == pid}


def ask(child: Child) -> dict:
    """One forward of each of the child's models; its output checksum."""
    child.asked = getattr(child, "asked", 0) + 1
    Path(f"{child.stop_file}.ask{child.asked}").write_text("")
    line = child.line()
    assert line["n"] == child.asked
    return line


def warm_up(env: dict, child: Child, pid: int, classes: set[str], timeout: float = 60.0
            ) -> tuple[dict[str, dict], dict]:
    """Forwards until the agent has seen each model in one (its hooks come a tick after
    it finds them): (models, the encoder's checksum)."""
    deadline = time.monotonic() + timeout
    found: dict[str, dict] = {}
    first = None
    while time.monotonic() < deadline:
        found = models_of(env, pid)
        if classes <= set(found):
            if all(found[c]["last_used"] for c in classes):
                assert first is not None
                return found, first
            out = ask(child)
            assert first is None or (out["sum"], out["sha"]) == (first["sum"], first["sha"])
            first = first or out
        time.sleep(0.3)
    raise AssertionError(f"models {classes} not seen in a forward; last: {found}")


def test_unload_to_disk_and_reload_keep_outputs_identical(tmp_path, env, children):
    child = Child(tmp_path, env, CHILD)
    children.append(child)
    pid = child.line()["pid"]
    models, first = warm_up(env, child, pid, {"Sequential", "Linear"})
    enc, trainee = models["Sequential"], models["Linear"]
    assert enc["state"] == "resident" and enc["device"] == "cpu" and enc["training"] is False
    assert trainee["training"] is True

    # a training-mode model is refused without --force (exit 1, the agent's reason)
    done = cli(env, "unload", "--pid", str(pid), "--model", trainee["id"], "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    refused = json.loads(done.stdout)
    assert refused["code"] == "refused" and "training" in refused["error"]
    assert models_of(env, pid)["Linear"]["state"] == "resident"

    # unload the eval model to disk
    done = cli(env, "unload", "--pid", str(pid), "--model", enc["id"], "--to", "disk", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    unloaded = json.loads(done.stdout)
    assert unloaded["ok"] and unloaded["state"] == "offloaded" and unloaded["target"] == "disk"
    assert unloaded["bytes_moved"] == enc["bytes"]
    after = models_of(env, pid)["Sequential"]
    assert after["state"] == "offloaded" and after["offloaded_to"] == "disk"

    # reload by hand, then the outputs are bit-identical
    done = cli(env, "reload", "--pid", str(pid), "--model", enc["id"], "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    reloaded = json.loads(done.stdout)
    assert reloaded["ok"] and reloaded["state"] == "resident"
    assert models_of(env, pid)["Sequential"]["state"] == "resident"
    again = ask(child)
    assert (again["sum"], again["sha"]) == (first["sum"], first["sha"])

    # unknown model: exit 2
    done = cli(env, "reload", "--pid", str(pid), "--model", "no-such-model", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert child.stop() == 0


def test_the_next_forward_reloads_an_unloaded_model(tmp_path, env, children):
    child = Child(tmp_path, env, CHILD)
    children.append(child)
    pid = child.line()["pid"]
    models, first = warm_up(env, child, pid, {"Sequential"})
    enc = models["Sequential"]
    done = cli(env, "unload", "--pid", str(pid), "--model", enc["id"], "--to", "disk")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "offloaded to disk" in done.stdout
    again = ask(child)  # a forward, no reload by hand
    assert (again["sum"], again["sha"]) == (first["sum"], first["sha"])
    assert models_of(env, pid)["Sequential"]["state"] == "resident"
    assert child.stop() == 0
