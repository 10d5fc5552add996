"""End to end: the window's remote hosts (``Fleet``, ``HostLink``,
``HostControllers``) against real ``serve`` processes on the ABI fake of
libnvidia-ml, and against a real ``sshd``.

Two servers with different GPUs: ``a`` on 127.0.0.2 (plain HTTP, two A100s,
recording history) and ``b`` on 127.0.0.3 (HTTPS with a self-signed
certificate and a token file, three H100s, a real agent).  Asserted:

* both connect, their GPUs under window-wide ids, ``a``'s stored history
  handed out under them; ``b``'s agent appears in ``b``'s view;
* a free cache, an unload and a terminate through the controllers reach
  ``b``'s processes and come back; the server's refusals come back with its
  reason;
* ``a`` killed: only ``a`` is disconnected (its last figures kept), ``b``
  keeps receiving; ``a`` started again on its port: connected again, and
  what it stored since the last snapshot that arrived (nothing while down);
* ``b``, then ``a``, frozen (SIGSTOP): the heartbeat gives it up within
  seconds, long before a TCP timeout, while the other keeps receiving;
  thawed: connected again;
* a wrong token, no token, and a server of another wire version: the reason
  says what is wrong and what to do;
* ``ssh://`` against a real sshd: an unknown host key never hangs and says
  to run ``ssh`` once in a terminal; with the key known, the host's GPUs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

import numpy as np
import pytest

from app.core.control.controller import AppController
from app.core.control.hosts import HostControllers
from app.core.control.records import Outcome
from app.core.control.requests import FreeCache, Refusal, RequestError, Terminate, Unload
from app.core.monitor.hosts import CONNECTED, DISCONNECTED
from app.core.remote.fleet import Fleet
from app.core.remote.host_config import HostConfig, host_key
from app.core.remote.link import HEARTBEAT_S, HostLink
from app.core.remote.ssh_transport import SSH_OPTIONS_ENV
from app.core.serve.access import own_user
from tests.e2e import remote_world as rw
from tests.e2e import sshd as ssh_world
from tests.e2e.fleet_world import Server, Watch, self_signed
from tests.e2e.remote_world import Agent, Host, token_file
from tests.e2e.test_serve_remote import OtherWire
from tests.fakes.nvml_abi import FakeGpu, FakeNvml, FakeProcess
from tests.fakes.processes import wait_for

pytestmark = pytest.mark.skipif(rw.unavailable_reason() is not None,
                                reason=rw.unavailable_reason() or "")

G = 1 << 30
ME = own_user()[0]  # the user the servers run as, and b's token acts for
TOKEN = "b-mine-" + "7" * 24
NOBODY_TOKEN = "b-nobody-" + "5" * 24


def a100(n: int) -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-80GB", f"GPU-aaaa000{n}-0000-4000-8000-00000000000{n}",
                   80 * G + 4096 * n, (20 + 30 * n) * G + 12_345, util_gpu=70 - 40 * n)


def h100(n: int) -> FakeGpu:
    return FakeGpu("NVIDIA H100 80GB HBM3", f"GPU-bbbb000{n}-0000-4000-8000-00000000000{n}",
                   80 * G - 4096 * n, (5 + 10 * n) * G + 6_789, util_gpu=10 * n)


@dataclass
class World:
    a: Server
    b: Server
    a_key: str
    b_key: str
    agent: Agent
    victim: int  # a process on b's GPU 1 that may be terminated
    fleet: Fleet
    watch: Watch
    controllers: HostControllers
    folder: str
    cert: str
    b_token: str  # the client's token file for b (this user, control)
    b_nobody: str  # a control token of another user

    def connected(self, *keys: str, timeout: float = 30.0) -> None:
        wait_for(f"{keys} to be connected",
                 lambda: all(self.watch.state(k) == CONNECTED for k in keys), timeout, 0.05)

    def act(self, request) -> object:
        """``request`` submitted as the window does: on the latest snapshot, answered."""
        self.controllers.on_snapshot(self.watch.snapshot())
        action = self.controllers.submit(request)
        assert self.controllers.wait(60), f"{request} did not finish"
        return action


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    folder = tempfile.mkdtemp(prefix="vst-hosts-")
    made = self_signed(folder, "127.0.0.3")
    if isinstance(made, str):
        pytest.skip(made)
    cert, key = made
    victim = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    # reaped the moment it ends: a zombie would look alive to the server
    threading.Thread(target=victim.wait, daemon=True).start()
    host_a = Host(FakeNvml(gpus=[a100(0), a100(1)]))
    host_b = Host(FakeNvml(gpus=[h100(0), h100(1), h100(2)],
                           processes=[FakeProcess(victim.pid, 1, 3 * G + 4321)]))
    os.mkdir(os.path.join(host_a.root_home, "state"), 0o700)  # where a records history
    server_tokens = token_file(folder, [f"{TOKEN} {ME} read,control",
                                        f"{NOBODY_TOKEN} nobody read,control"])
    a = b = agent = fleet = watch = None
    controllers = None
    try:
        a = Server(host_a, "127.0.0.2:0", history=True)
        b = Server(host_b, "127.0.0.3:0", "--tls-cert", cert, "--tls-key", key,
                   "--token-file", server_tokens)
        agent = Agent(host_b, "agent")
        # the fleet's first look at a hands out a's last hour: some must be stored
        wait_for("a's first stored samples", lambda: a.stored_gpus() == 2, 30)
        b_token = token_file(folder, [TOKEN], "b-token")
        b_nobody = token_file(folder, [NOBODY_TOKEN], "b-nobody")
        configs = [HostConfig(a.url), HostConfig(b.url, b_token, cert)]
        fleet = Fleet(configs)
        a_key, b_key = fleet.keys()
        fleet.start()
        watch = Watch(fleet)
        controllers = HostControllers(AppController(None), fleet.directory)
        yield World(a, b, a_key, b_key, agent, victim.pid, fleet, watch, controllers,
                    folder, cert, b_token, b_nobody)
    finally:
        if agent is not None:
            agent.stop()
        for part in (controllers, watch, fleet, a, b):
            if part is not None:
                part.close()
        victim.kill()
        for host in (host_a, host_b):
            host.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_both_hosts_connect_with_their_own_gpus(world):
    assert world.a_key == host_key(HostConfig(world.a.url).address)
    assert world.a_key.startswith("127.0.0.2:") and world.b_key.startswith("127.0.0.3:")
    world.connected(world.a_key, world.b_key)
    a, b = world.watch.view(world.a_key), world.watch.view(world.b_key)
    assert (a.url, b.url) == (world.a.url, world.b.url)
    assert [(g.display_id, g.host, g.name, g.uuid) for g in a.snapshot.gpus] == [
        (f"{i}@{world.a_key}", world.a_key, "NVIDIA A100-SXM4-80GB", a100(i).uuid)
        for i in range(2)]
    assert [(g.display_id, g.memory_total, g.memory_used) for g in b.snapshot.gpus] == [
        (f"{i}@{world.b_key}", h100(i).total, h100(i).used) for i in range(3)]
    assert a.reason is None and b.reason is None
    assert b.user == ME and a.name  # b's token acts as this user; the host names itself
    # one GPU's process, under the host's own pid
    (proc,) = b.snapshot.gpus[1].processes
    assert (proc.pid, proc.gpu_memory) == (world.victim, 3 * G + 4321)


def test_a_hosts_stored_history_is_handed_out_under_its_ids(world):
    world.connected(world.a_key)
    seed = wait_for("a's stored history", lambda: world.watch.seeds(world.a_key), 15)[0]
    assert {s.display_id for s in seed.gpus.values()} == {f"0@{world.a_key}",
                                                          f"1@{world.a_key}"}
    series = seed.gpus[a100(0).uuid]
    assert series.t.size >= 1 and abs(series.t[-1] - time.time()) < 120
    assert series.used[-1] == a100(0).used and series.total[-1] == a100(0).total
    assert all(s.empty for s in world.watch.seeds(world.b_key))  # b records none


def test_an_agent_on_one_host_is_in_that_hosts_view_only(world):
    world.connected(world.a_key, world.b_key)
    pid = world.agent.pid
    view = wait_for("b's agent and its model", lambda: (
        v := world.watch.view(world.b_key)).snapshot.agents.get(pid)
        and v.snapshot.agents[pid].models and v, 60)
    assert [m.id for m in view.snapshot.agents[pid].models] == ["m1"]
    assert pid not in world.watch.view(world.a_key).snapshot.agents


def test_actions_reach_the_real_agent_on_its_host_and_refusals_say_why(world):
    wait_for("b's agent", lambda: world.agent.pid in world.watch.view(
        world.b_key).snapshot.agents, 60)
    pid, b = world.agent.pid, world.b_key
    freed = world.act(FreeCache.of(pid, host=b))
    assert freed.host == b and freed.results[pid].ok, freed.results
    unloaded = world.act(Unload(pid, "m1", to="disk", host=b))
    assert unloaded.host == b and unloaded.result.ok, unloaded.result
    event = unloaded.result.event
    assert (event.action, event.state, event.target) == ("unload", "offloaded", "disk")
    wait_for("the model offloaded in b's view", lambda: [
        m.state for m in world.watch.view(b).snapshot.agents[pid].models] == ["offloaded"], 30)
    # the same pid is not a process of a's: refused here, nothing sent
    with pytest.raises(RequestError) as err:
        world.act(FreeCache.of(pid, host=world.a_key))
    assert err.value.code in (Refusal.UNKNOWN_PROCESS, Refusal.NO_AGENT)
    # the server's refusals, with its reasons
    directory = world.fleet.directory(b)
    gone = directory.free_cache(4_000_000)
    assert not gone.ok and "no process 4000000 on this host" in gone.error
    nobody = HostLink(HostConfig(world.b.url, world.b_nobody, world.cert), b)
    nobody.start()
    try:
        wait_for("nobody's link", lambda: nobody.view().state == CONNECTED, 30)
        refused = nobody.agents.free_cache(pid)
        not_owned = f"process {pid} is not nobody's: only your own processes can be acted on"
        assert not refused.ok and refused.error.endswith(not_owned), refused
        # the same through a controller: the action's result carries the server's reason
        theirs = HostControllers(AppController(None), lambda key: nobody.agents)
        view = nobody.view()
        theirs.on_snapshot(dataclasses.replace(world.watch.snapshot(), hosts=(view,)))
        action = theirs.submit(FreeCache.of(pid, host=b))
        assert theirs.wait(60)
        assert not action.results[pid].ok and action.results[pid].error.endswith(not_owned)
        theirs.close()
    finally:
        nobody.close()


def test_a_terminate_is_carried_out_by_the_hosts_server(world):
    world.connected(world.b_key)
    view = world.watch.view(world.b_key)
    (proc,) = view.snapshot.gpus[1].processes
    action = world.act(Terminate(proc.pid, proc.create_time, grace_s=5.0, host=world.b_key))
    assert action.host == world.b_key
    assert action.result.outcome is Outcome.EXITED, action.result
    assert not os.path.exists(f"/proc/{world.victim}")


def test_a_killed_host_goes_alone_and_comes_back_on_its_port(world):
    world.connected(world.a_key, world.b_key)
    last = world.watch.view(world.a_key).snapshot
    killed_at = time.time()
    world.a.kill()
    down = wait_for("a disconnected", lambda: (v := world.watch.view(
        world.a_key)).state == DISCONNECTED and v, 15, 0.05)
    assert killed_at - 1 <= down.since <= time.time()
    assert down.reason and world.a.url in down.reason
    # its last figures stay (the window greys them), never dropped, never zero
    assert [g.memory_used for g in down.snapshot.gpus] == [g.memory_used for g in last.gpus]
    # the other host is not touched: still connected, still receiving
    heard = world.watch.arrivals(world.b_key)
    wait_for("b to keep receiving", lambda: world.watch.arrivals(world.b_key) > heard + 4, 10)
    assert world.watch.state(world.b_key) == CONNECTED
    # retries keep "disconnected since" the loss, saying why
    wait_for("a retry refused", lambda: "connection refused" in (
        world.watch.view(world.a_key).reason or ""), 15)
    assert world.watch.view(world.a_key).since == down.since
    seeds = len(world.watch.seeds(world.a_key))
    heard_a = world.watch.arrivals(world.a_key)
    world.a.restart()
    restarted_at = time.time()
    back = wait_for("a reconnected", lambda: (v := world.watch.view(
        world.a_key)).state == CONNECTED and v, 30, 0.05)
    assert back.reason is None and back.since >= down.since
    # what it kept since the last snapshot that arrived: nothing while it was down
    wait_for("a to stream again", lambda: world.watch.arrivals(world.a_key) > heard_a + 2, 15)
    (seed,) = world.watch.seeds(world.a_key)[seeds:]
    t = seed.gpus[a100(0).uuid].t
    assert not np.any((t > killed_at + 1.0) & (t < restarted_at - 1.0))
    assert t.size == 0 or t[0] >= killed_at - 15.0  # the seconds since, not the hour again


@pytest.mark.parametrize("frozen", ["b", "a"])  # over HTTPS, then plain HTTP
def test_a_frozen_host_is_given_up_by_the_heartbeat_and_comes_back(world, frozen):
    server, key = (world.b, world.b_key) if frozen == "b" else (world.a, world.a_key)
    other = world.a_key if frozen == "b" else world.b_key
    world.connected(world.a_key, world.b_key)
    gpus = [g.display_id for g in world.watch.view(key).snapshot.gpus]
    server.freeze()
    frozen_at = time.monotonic()
    try:
        down = wait_for(f"{frozen} given up", lambda: (v := world.watch.view(
            key)).state == DISCONNECTED and v, HEARTBEAT_S + 10, 0.05)
        took = time.monotonic() - frozen_at
        assert took < 15, f"{took:.1f} s to notice a frozen host"
        assert down.reason.startswith("stopped answering"), down.reason
        assert [g.display_id for g in down.snapshot.gpus] == gpus  # greyed, not dropped
        heard = world.watch.arrivals(other)
        wait_for("the other to keep receiving", lambda: world.watch.arrivals(other) > heard + 4,
                 10)
        assert world.watch.state(other) == CONNECTED
    finally:
        server.thaw()
    world.connected(key, timeout=45)
    assert world.watch.view(key).reason is None


def _reason(config: HostConfig, key: str = "test") -> str:
    link = HostLink(config, key)
    link.start()
    try:
        return wait_for(f"{config.url} to give a reason", lambda: (
            v := link.view()).state == DISCONNECTED and v.reason, 30, 0.05)
    finally:
        link.close()


def test_a_wrong_or_missing_token_says_what_to_do(world):
    wrong = token_file(world.folder, ["w" * 32], "wrong-token")
    reason = _reason(HostConfig(world.b.url, wrong, world.cert))
    assert reason.startswith(f"{world.b.url} refused the token: copy a token from the "
                             "server's token file"), reason
    reason = _reason(HostConfig(world.b.url, None, world.cert))
    assert reason.startswith(f"{world.b.url} wants a token: give this host a token file"), \
        reason
    reason = _reason(HostConfig(world.b.url, world.b_token))  # no certificate named
    assert "certificate is not trusted" in reason and "--tls-ca FILE" in reason


@pytest.mark.parametrize("strict", [True, False])
def test_a_server_of_another_wire_version_names_both(world, strict):
    handler = type("Handler", (OtherWire,), {"strict": strict})
    stub = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    try:
        reason = _reason(HostConfig(f"http://127.0.0.1:{stub.server_address[1]}"))
    finally:
        stub.shutdown()
        stub.server_close()
    assert "wire version 2" in reason, reason
    assert ("'1'" if strict else "this one speaks 1") in reason, reason


@pytest.fixture(scope="module")
def ssh_host() -> Iterator[tuple[ssh_world.Sshd, Host]]:
    why = ssh_world.unavailable_reason()
    if why is not None:
        pytest.skip(why)
    sshd, host = ssh_world.Sshd(), None
    try:
        host = Host(FakeNvml(gpus=[FakeGpu("NVIDIA L4", "GPU-cccc0001-0000-4000-8000-000000000001",
                                           24 * G - 4096, 7 * G + 99)]))
        yield sshd, host
    finally:
        sshd.stop()
        if host is not None:
            host.close()


def test_ssh_with_an_unknown_host_key_never_hangs_and_says_what_to_run(ssh_host, monkeypatch):
    sshd, host = ssh_host
    monkeypatch.setenv(SSH_OPTIONS_ENV, f"-F {sshd.stranger_config()}")
    config = HostConfig(f"ssh://root@127.0.0.1:{sshd.port}",
                        remote_command=host.remote_command())
    started = time.monotonic()
    reason = _reason(config, host_key(config.address))
    assert time.monotonic() - started < 20
    assert "Host key verification failed" in reason, reason
    assert f"add it by running `ssh -p {sshd.port} root@127.0.0.1` once in a terminal" in reason


def test_ssh_with_the_host_key_known_shows_the_hosts_gpus(ssh_host, monkeypatch):
    sshd, host = ssh_host
    monkeypatch.setenv(SSH_OPTIONS_ENV, f"-F {sshd.stranger_config()} "
                                        f"-o UserKnownHostsFile={sshd.known_hosts}")
    config = HostConfig(f"ssh://root@127.0.0.1:{sshd.port}",
                        remote_command=host.remote_command())
    fleet = Fleet([config])
    fleet.start()
    key = f"127.0.0.1:{sshd.port}"
    try:
        view = wait_for("the ssh host", lambda: next(
            (v for v in fleet.views() if v.state == CONNECTED and v.snapshot is not None), None),
            30, 0.05)
        assert view.key == key and view.user == "root" and view.reason is None
        assert [(g.display_id, g.name, g.memory_used) for g in view.snapshot.gpus] == [
            (f"0@{key}", "NVIDIA L4", 7 * G + 99)]
    finally:
        fleet.close()
        assert fleet.views() == ()
