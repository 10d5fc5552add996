"""End to end: two real users on one (fake-driver) GPU host, and who may do what.

Root runs the system server (``serve --token-file F`` on loopback, the ABI fake
of libnvidia-ml); a real agent (CPU torch, one model) runs as root and another
as the neighbour (``vst-neighbour``, made with useradd).  Asserted:

* the system server reads both users' agents;
* a control token acts on its own user's process only: the other's is refused
  (``not_owned``, "is not <user>'s"), both ways;
* a read-only token reads and is refused every action (``forbidden``); a wrong
  token is a 401 with a clear message; with no token file a loopback server
  answers reads and refuses actions naming ``--token-file``;
* a per-user server run as the neighbour (``serve --stdio``, spoken to in its
  JSON lines) sees the neighbour's agent only and refuses root's process;
* runtime folders the neighbour plants under another uid's name
  (``vram-steward-4242``, ``vram-steward-0-*``) are never read by root's server.

Needs root, useradd and setpriv; skips with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e import remote_world as rw
from tests.e2e.remote_world import Agent, Host, Serve, cli, token_file
from tests.fakes.neighbour import NAME, FakeNeighbourAgent, neighbour
from tests.fakes.nvml_abi import FakeGpu, FakeNvml, FakeProcess
from tests.fakes.processes import read_line, wait_for

NB_TOKEN = "vst_neighbour-token-0123456789"
ROOT_TOKEN = "vst_root-token-0123456789abcdef"
READ_TOKEN = "vst_read-only-token-0123456789"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX: users, AF_UNIX agents")


@dataclass
class World:
    host: Host
    uid: int
    gid: int
    python: str  # the neighbour's interpreter and PYTHONPATH
    pythonpath: str
    ours: Agent  # root's
    theirs: Agent  # the neighbour's
    server: Serve
    tokens: dict[str, str]  # client token files: "neighbour", "root", "read", "wrong"

    def ask(self, who: str | None, *args: str) -> subprocess.CompletedProcess:
        extra = ["--token-file", self.tokens[who]] if who else []
        return cli(self.host, *args, "--host", self.server.url, *extra)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    uid, gid = neighbour()
    reason = rw.unavailable_reason() or (None if rw.SETPRIV else "setpriv is missing")
    if reason:
        pytest.skip(reason)
    found = rw.neighbour_python(uid, gid)
    if isinstance(found, str):
        pytest.skip(found)
    host = Host(FakeNvml(gpus=[FakeGpu(
        "NVIDIA H100 80GB HBM3", "GPU-5e1f0000-aaaa-4bbb-8ccc-0123456789ab",
        total=85_520_809_984, used=7_301_234_567, reserved=512_345_679)]))
    made: list[Any] = []
    try:
        ours = Agent(host, "ours")
        made.append(ours)
        theirs = Agent(host, "theirs", (uid, gid), *found)
        made.append(theirs)
        host.fake.processes = [FakeProcess(ours.pid, 0, 1_234_567_891),
                               FakeProcess(theirs.pid, 0, 2_345_678_901)]
        host.fake.write(host.config)
        grants = token_file(host.root_home, [f"{NB_TOKEN} {NAME} read,control",
                                             f"{ROOT_TOKEN} root read,control",
                                             f"{READ_TOKEN} grafana read"], "grants")
        server = Serve(host, "--token-file", grants)
        made.append(server)
        tokens = {who: token_file(host.root_home, [token], who) for who, token in
                  [("neighbour", NB_TOKEN), ("root", ROOT_TOKEN), ("read", READ_TOKEN),
                   ("wrong", "vst_nobody-has-this-token-0123")]}
        world = World(host, uid, gid, *found, ours, theirs, server, tokens)
        wait_for("both agents and their models on the server",
                 lambda: {r["pid"] for r in agents_of(world, "read") if r["models"]}
                 == {ours.pid, theirs.pid})
        yield world
    finally:
        for thing in reversed(made):
            thing.stop()
        host.close()


def agents_of(world: World, who: str | None) -> list[dict]:
    done = world.ask(who, "agents", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_system_server_reads_every_users_agents(world):
    records = {r["pid"]: r for r in agents_of(world, "neighbour")}
    assert set(records) == {world.ours.pid, world.theirs.pid}
    for record in records.values():
        assert record["error"] is None and record["torch_status"] == "loaded"
        assert [m["name"] for m in record["models"]] == ["Sequential"]
    done = world.ask("read", "status", "--json")
    assert done.returncode == 0, done.stderr
    (gpu,) = json.loads(done.stdout)["gpus"]
    users = {p["pid"]: p["user"] for p in gpu["processes"]}
    assert users == {world.ours.pid: "root", world.theirs.pid: NAME}


def test_a_control_token_acts_on_its_own_users_processes_only(world):
    for who, user, mine, other in (("neighbour", NAME, world.theirs, world.ours),
                                   ("root", "root", world.ours, world.theirs)):
        refused = world.ask(who, "free-cache", "--pid", str(other.pid))
        assert refused.returncode == 1, refused
        assert f"process {other.pid} is not {user}'s" in refused.stderr and not refused.stdout
        refused = world.ask(who, "unload", "--pid", str(other.pid), "--model", "m1", "--json")
        assert refused.returncode == 1 and json.loads(refused.stdout)["code"] == "not_owned"
        assert "Traceback" not in refused.stderr

        freed = world.ask(who, "free-cache", "--pid", str(mine.pid), "--json")
        assert freed.returncode == 0, freed
        assert json.loads(freed.stdout)[0]["ok"] is True
        done = world.ask(who, "unload", "--pid", str(mine.pid), "--model", "m1", "--to", "disk",
                         "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        unloaded = json.loads(done.stdout)
        assert unloaded["ok"] and unloaded["state"] == "offloaded", unloaded
    expected = {world.ours.pid: "offloaded", world.theirs.pid: "offloaded"}

    def states() -> dict[int, str]:  # the server's reports, polled every 0.25 s
        return {m["pid"]: m["state"] for m in json.loads(world.ask("read", "models",
                                                                   "--json").stdout)}

    wait_for("both models offloaded in the server's reports", lambda: states() == expected,
             timeout=10.0)
    log = world.server.errors()
    assert f"{NAME} (uid {world.uid}) via http: free_cache pid={world.ours.pid}" in log


def test_a_read_only_token_reads_and_never_acts(world):
    done = world.ask("read", "status", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["gpus"], done.stderr
    for agent in (world.ours, world.theirs):
        refused = world.ask("read", "free-cache", "--pid", str(agent.pid))
        assert refused.returncode == 1 and "this token has no control scope" in refused.stderr
        refused = world.ask("read", "reload", "--pid", str(agent.pid), "--model", "m1", "--json")
        assert refused.returncode == 1 and json.loads(refused.stdout)["code"] == "forbidden"


def test_a_wrong_token_is_a_401_with_a_clear_message(world):
    done = world.ask("wrong", "status", "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"VRAM Steward: {world.server.url}: wrong token"
    request = urllib.request.Request(f"{world.server.url}/api/v1/snapshot",
                                     headers={"Authorization": "Bearer vst_not-a-token-at-all"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 401
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")
    assert json.loads(caught.value.read())["code"] == "unauthorized"


def test_without_a_token_file_a_loopback_server_reads_and_refuses_actions(world):
    server = Serve(world.host)  # makes its own token file; reads need none on loopback
    try:
        done = cli(world.host, "status", "--json", "--host", server.url)
        assert done.returncode == 0 and json.loads(done.stdout)["gpus"], done.stderr
        listed = cli(world.host, "agents", "--json", "--host", server.url)
        assert {r["pid"] for r in json.loads(listed.stdout)} == {world.ours.pid, world.theirs.pid}
        refused = cli(world.host, "free-cache", "--pid", str(world.ours.pid), "--host", server.url)
        assert refused.returncode == 1, refused
        assert refused.stderr.count("--token-file") == 1, refused.stderr  # said once
        assert "free_cache needs a token with the control scope" in refused.stderr
        assert "tokens: " in server.errors()
    finally:
        server.stop()


class StdioServer:
    """``serve --stdio`` as the neighbour, spoken to in its JSON lines."""

    def __init__(self, world: World) -> None:
        argv = [rw.SETPRIV or "setpriv", f"--reuid={world.uid}", f"--regid={world.gid}",
                "--clear-groups", world.python, "-m", "app", "serve", "--stdio",
                "--no-history", "--no-auto-unload"]
        self.proc = subprocess.Popen(argv, env=world.host.env(world.theirs.home, world.pythonpath),
                                     cwd=world.theirs.home, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.ident = 0

    def line(self, timeout: float = 30.0) -> dict[str, Any]:
        raw = read_line(self.proc, timeout)
        assert raw, "the per-user server said nothing"
        return json.loads(raw)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.ident += 1
        self.proc.stdin.write(json.dumps({"wire": 1, "id": self.ident, "method": method,
                                          "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        answer = self.line()
        assert answer["id"] == self.ident, answer
        return answer

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the client left: the server ends
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9


def test_a_per_user_server_sees_its_users_agents_only(world):
    server = StdioServer(world)
    try:
        hello = server.line()
        assert hello["type"] == "hello" and hello["result"]["user"] == NAME
        assert hello["result"]["scopes"] == ["control", "read"]
        listed = wait_for("the neighbour's agent", lambda: server.call("agents")["result"])
        assert [item["entry"]["pid"] for item in listed] == [world.theirs.pid]
        refused = server.call("free_cache", pid=world.ours.pid)
        assert refused["code"] == "not_owned", refused
        assert f"process {world.ours.pid} is not {NAME}'s" in refused["error"]
        freed = server.call("free_cache", pid=world.theirs.pid, timeout_s=30)
        assert freed["result"]["ok"] is True, freed
    finally:
        code = server.close()
    assert code == 0, server.proc.stderr.read().decode() if server.proc.stderr else code


def test_runtime_folders_planted_under_another_uids_name_are_never_read(world):
    planted = world.host.runtime(4242)
    sockets = os.path.join(world.host.tmp, "planted-sockets")
    os.mkdir(sockets)
    os.chown(sockets, world.uid, world.gid)
    fake = FakeNeighbourAgent(world.uid, world.gid, planted, sockets,
                              os.path.join(world.host.tmp, "planted.log"))
    rootish = f"{world.host.runtime(0)}-planted"
    try:
        entry = os.path.join(planted, "agents", f"{fake.pid}.json")
        shutil.copytree(planted, rootish)
        for top in (planted, rootish):  # private in every way but their owner
            for path, mode in ((top, 0o700), (os.path.join(top, "agents"), 0o700),
                               (os.path.join(top, "agents", os.path.basename(entry)), 0o600)):
                os.chown(path, world.uid, world.gid)
                os.chmod(path, mode)
        time.sleep(2.5)  # the server's registry scans (every second) come and go
        assert {r["pid"] for r in agents_of(world, "root")} == {world.ours.pid, world.theirs.pid}
        refused = world.ask("neighbour", "free-cache", "--pid", str(fake.pid))
        assert refused.returncode == 2 and f"no agent in process {fake.pid}" in refused.stderr
        assert fake.requests() == []
    finally:
        fake.close()
        shutil.rmtree(planted, ignore_errors=True)
        shutil.rmtree(rootish, ignore_errors=True)
