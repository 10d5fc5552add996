"""Shared fixtures for the agent tests: isolated dirs, a raw client, children."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from app.agent import protocol

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BOOTSTRAP = os.path.join(REPO, "app", "agent", "_bootstrap")
PYTHON = sys.executable


@pytest.fixture(autouse=True, scope="session")
def _isolated_state():
    state = tempfile.mkdtemp(prefix="vs-state-")
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = state
    yield state
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


def offload_mappings(folder: str) -> list[str]:
    """This process's mappings of offload files in ``folder``: a disk unload's
    files have no name there, only the mapping holds them."""
    real = os.path.realpath(folder)
    with open("/proc/self/maps") as f:
        return [line.split(None, 5)[5].strip() for line in f
                if len(line.split(None, 5)) == 6
                and line.split(None, 5)[5].startswith(real + "/")]


def short_tmpdir() -> str:
    """A 0700 dir with a short path (AF_UNIX path limit)."""
    return tempfile.mkdtemp(prefix="vst", dir="/tmp")


class Client:
    """A raw protocol client for tests."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        if address.startswith("127.0.0.1:"):
            self.sock = socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])),
                                                 timeout=timeout)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(address)
        self.decoder = protocol.FrameDecoder()
        self.pending: list = []
        self.next_id = 0
        self.hello = self.recv()

    def recv(self) -> dict:
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("connection closed")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        rid = self.next_id
        self.sock.sendall(protocol.encode(protocol.request(rid, method, params)))
        while True:
            msg = self.recv()
            if msg.get("id") == rid:
                return msg

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def agent_env(runtime: str, **extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = BOOTSTRAP + os.pathsep + extra.pop("PYTHONPATH", "")
    env["VRAM_STEWARD_AGENT"] = "1"
    env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    env.update(extra)
    return env


def registry_dir(runtime: str) -> str:
    return os.path.join(runtime, "agents")


def read_entries(directory: str) -> list[dict]:
    """Every readable ``<pid>.json`` in ``directory`` (what the app's hub
    lists); malformed files skipped."""
    out: list[dict] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json") or not name[:-5].isdigit():
            continue
        try:
            with open(os.path.join(directory, name), "rb") as f:
                value = json.loads(f.read(1024 * 1024).decode("utf-8"))
        except Exception:
            continue
        if isinstance(value, dict) and isinstance(value.get("pid"), int):
            out.append(value)
    return out


def wait_entry(runtime: str, pid: int, timeout: float = 30.0) -> dict:
    path = os.path.join(registry_dir(runtime), "%d.json" % pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError("no registry entry for pid %d" % pid)


def wait_line(proc: subprocess.Popen, prefix: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("child exited before printing %r (rc=%r, stderr=%s)"
                                 % (prefix, proc.poll(), proc.stderr.read() if proc.stderr else ""))
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise AssertionError("timeout waiting for %r" % prefix)


TRAIN_CHILD = r'''
import json, os, sys, time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)

class Shared(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32),
                                        torch.nn.ReLU(), torch.nn.Linear(32, 16))
        self.out = torch.nn.Linear(16, 50, bias=False)
        self.out.weight = self.emb.weight              # tied: counted once
        self.register_buffer("scale", torch.ones(7, dtype=torch.float64))
    def forward(self, x):
        return self.out(self.body(self.emb(x))) * self.scale.sum().float()

model = Shared()
seen, params, pbytes, bbytes = set(), 0, 0, 0
for p in model.parameters():
    if id(p) not in seen:
        seen.add(id(p)); params += p.numel(); pbytes += p.numel() * p.element_size()
for b in model.buffers():
    bbytes += b.numel() * b.element_size()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randint(0, 50, (8,))
print("EXPECT " + json.dumps({"params": params, "param_bytes": pbytes, "buffer_bytes": bbytes}), flush=True)
stop = sys.argv[1]
losses = []
steps = 0
while not os.path.exists(stop) or steps < 20:
    loss = torch.nn.functional.cross_entropy(model(x), x)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(round(loss.item(), 6)); steps += 1
    if steps >= 200000:
        break
    time.sleep(0.05)
print("LOSSES " + json.dumps(losses[:20]), flush=True)
print("STEPS %d" % steps, flush=True)
'''


@pytest.fixture(scope="session")
def training_child():
    """A child started with the bootstrap that trains until told to stop."""
    runtime = short_tmpdir()
    stop = os.path.join(runtime, "stop")
    proc = subprocess.Popen([PYTHON, "-c", TRAIN_CHILD, stop], env=agent_env(runtime),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=runtime)
    expect = json.loads(wait_line(proc, "EXPECT "))
    entry = wait_entry(runtime, proc.pid)
    info = {"proc": proc, "runtime": runtime, "entry": entry, "expect": expect, "stop": stop}
    yield info
    open(stop, "w").close()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def live():
    """A tracker and manager fed by torch's registration hooks, as in a running
    agent, but driven by the test (``live.refresh()`` is the agent's tick)."""
    import types

    import torch

    from app.agent import integrations, manager, models

    previous, previous_steps = models._ACTIVE, list(integrations._STEP_HOOK)
    tracker = models.ModelTracker()
    mgr = manager.Manager(tracker)
    tracker.activate()
    integrations.on_torch(torch, tracker, mgr.steps)

    def refresh():
        tracker.refresh(torch)
        return tracker

    def listed():
        refresh()
        return tracker.models([], mgr.annotate)

    yield types.SimpleNamespace(tracker=tracker, manager=mgr, refresh=refresh, listed=listed)
    tracker.deactivate()
    tracker.release()
    mgr.retired.drop(everything=True)  # no timer of this test may reach the next
    models._ACTIVE = previous  # an agent this module started keeps being fed
    integrations._STEP_HOOK[:] = previous_steps or integrations._STEP_HOOK
