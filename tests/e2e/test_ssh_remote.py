"""End to end: ``--host ssh://root@127.0.0.1:PORT`` through a real OpenSSH server.

The test starts ``/usr/sbin/sshd`` on a free loopback port with its own host
key, config and authorized key; the client runs the system ``ssh`` with a
config of the test's (``VRAM_STEWARD_SSH_OPTIONS="-F FILE"``), and
``--remote-command`` starts this venv's app there on the ABI fake of
libnvidia-ml (its variables exported inside the remote command).  Asserted:

* ``status --json`` over SSH prints the GPUs and processes the fake was
  given, exactly as the local ``status --json`` on the same fake does;
* ``agents``, ``models``, ``free-cache`` and ``unload`` reach a real agent
  (CPU torch) through the SSH user's server, each answered in one go by the
  server that command started (its first reports awaited);
* a key the server does not know, and a remote command that does not exist,
  end in one clear line on stderr and exit status 2, no traceback.

Needs root (sshd, and a login as root), sshd, ssh and ssh-keygen
(``tests.e2e.sshd``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e import remote_world as rw
from tests.e2e import sshd
from tests.e2e.remote_world import Agent, Host, cli
from tests.e2e.sshd import Sshd, keygen
from tests.fakes.nvml_abi import FakeGpu, FakeNvml, FakeProcess, Helpers
from tests.fakes.processes import wait_for

#: What a GPU and a process must show the same over SSH as here.
GPU_KEYS = ("index", "name", "uuid", "memory_total", "memory_used", "memory_free",
            "memory_reserved", "utilization_gpu", "utilization_memory", "temperature",
            "power_draw", "power_limit", "state", "unattributed_memory")
PROCESS_KEYS = ("pid", "gpu_memory", "sm_util", "kind", "name", "user", "command")


def unavailable_reason() -> str | None:
    return sshd.unavailable_reason() or rw.unavailable_reason()


pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=unavailable_reason() or "")


@dataclass
class World:
    host: Host
    sshd: Sshd
    agent: Agent
    url: str
    env: dict[str, str]  # the client's: ssh reads the test's config

    def remote(self, *args: str, remote_command: str | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return cli(self.host, *args, "--host", self.url, "--remote-command",
                   remote_command or self.host.remote_command(), env=env or self.env)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    host = sshd = agent = None
    with Helpers(2) as helpers:
        try:
            sshd = Sshd()
            host = Host(FakeNvml(gpus=[
                FakeGpu("NVIDIA A100-SXM4-80GB", "GPU-55aa0001-2b3c-4d5e-8f90-a1b2c3d4e5f6",
                        total=85_899_345_920 - 7 * 4096, used=23_456_789_013,
                        reserved=567_890_123, util_gpu=71, util_mem=43, temp=64,
                        power_mw=312_456, power_limit_mw=400_000, fan=55),
                FakeGpu("NVIDIA A100-SXM4-80GB", "GPU-55aa0002-2b3c-4d5e-8f90-a1b2c3d4e5f6",
                        total=85_899_345_920 - 9 * 4096, used=1_234_567_891, reserved=0)],
                processes=[FakeProcess(helpers[0], 0, 9_876_543_211, sm=37),
                           FakeProcess(helpers[1], 0, 3_456_789_013, lists="graphics"),
                           FakeProcess(helpers[1], 1, 987_654_323, sm=5)]))
            agent = Agent(host, "agent")
            wait_for("the agent to find its model", lambda: [  # asked here, not over SSH
                r for r in json.loads(cli(host, "agents", "--json").stdout)
                if r["pid"] == agent.pid and r["models"]])
            env = {**host.env(), "VRAM_STEWARD_SSH_OPTIONS": f"-F {sshd.client_config()}"}
            yield World(host, sshd, agent, f"ssh://root@127.0.0.1:{sshd.port}", env)
        finally:
            if agent is not None:
                agent.stop()
            if sshd is not None:
                sshd.stop()
            if host is not None:
                host.close()


def test_status_over_ssh_is_the_local_status_of_the_fake(world):
    here = cli(world.host, "status", "--json")
    assert here.returncode == 0, here.stderr
    there = world.remote("status", "--json")
    assert there.returncode == 0, there.stderr
    local, remote = json.loads(here.stdout), json.loads(there.stdout)
    assert remote["source"] == local["source"] == "nvml"
    assert remote["driver_version"] == local["driver_version"] == world.host.fake.driver_version
    assert [[g[k] for k in GPU_KEYS] for g in remote["gpus"]] == \
        [[g[k] for k in GPU_KEYS] for g in local["gpus"]]
    for mine, theirs in zip(local["gpus"], remote["gpus"], strict=True):
        assert sorted([p[k] for k in PROCESS_KEYS] for p in theirs["processes"]) == \
            sorted([p[k] for k in PROCESS_KEYS] for p in mine["processes"])
    # and those are the fake's figures
    fake = world.host.fake
    assert [(g["uuid"], g["memory_total"], g["memory_used"], g["memory_reserved"])
            for g in remote["gpus"]] == [(g.uuid, g.total, g.used, g.reserved) for g in fake.gpus]
    assert {(g["index"], p["pid"], p["gpu_memory"]) for g in remote["gpus"]
            for p in g["processes"]} == {(p.gpu, p.pid, p.memory) for p in fake.processes}
    assert remote["gpus"][0]["temperature"] == 64.0 and remote["gpus"][0]["power_draw"] == 312.456


def test_agents_models_and_actions_reach_a_real_agent_over_ssh(world):
    pid = world.agent.pid
    # each command starts a server of its own: it answers once it has asked each agent
    done = world.remote("agents", "--json")
    assert done.returncode == 0, done.stderr
    (record,) = [r for r in json.loads(done.stdout) if r["pid"] == pid]
    assert record["error"] is None and record["torch_status"] == "loaded", record
    assert [m["name"] for m in record["models"]] == ["Sequential"]
    done = world.remote("models", "--json")
    assert done.returncode == 0, done.stderr
    (model,) = [m for m in json.loads(done.stdout) if m["pid"] == pid]
    assert (model["id"], model["state"], model["params"]) == ("m1", "resident", 1348)

    done = world.remote("free-cache", "--pid", str(pid), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)[0]["ok"] is True
    done = world.remote("unload", "--pid", str(pid), "--model", "m1", "--to", "disk", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    unloaded = json.loads(done.stdout)
    assert unloaded["ok"] and unloaded["state"] == "offloaded" and unloaded["target"] == "disk"
    done = world.remote("models", "--json")
    assert [m["state"] for m in json.loads(done.stdout) if m["pid"] == pid] == ["offloaded"]


def test_a_key_the_server_does_not_know_is_one_clear_line(world):
    stranger = os.path.join(world.sshd.folder, "stranger_key")
    keygen(stranger)  # a key of its own, not in authorized_keys
    config = world.sshd.client_config(stranger, "stranger_config")
    started = time.monotonic()
    done = world.remote("status", "--json",
                        env={**world.env, "VRAM_STEWARD_SSH_OPTIONS": f"-F {config}"})
    assert done.returncode == 2 and done.stdout == ""
    assert time.monotonic() - started < 20
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"VRAM Steward: {world.url}: the connection ended (ssh exit status "
                           "255)"), line
    assert "Permission denied (publickey)" in line


def test_a_remote_command_that_does_not_exist_is_one_clear_line(world):
    done = world.remote("agents", "--json", remote_command="/opt/no-such/vram-steward")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"VRAM Steward: {world.url}: "), line
    assert "/opt/no-such/vram-steward: No such file or directory" in line
    assert "--remote-command" in line
