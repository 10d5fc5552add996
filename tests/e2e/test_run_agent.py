"""End to end: ``main.py run`` starts real Python children running real (CPU)
torch with the real agent loaded; the CLI and the client find and query them.

Every test uses a private runtime dir (``VRAM_STEWARD_RUNTIME_DIR``), short
enough for AF_UNIX socket paths.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from app.core.agents import client as agent_client
from app.core.agents import registry as agent_registry

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "app" / "agent" / "_bootstrap"

pytestmark = [
    pytest.mark.skipif(not (BOOTSTRAP / "sitecustomize.py").exists(),
                       reason="the agent's bootstrap (app/agent/_bootstrap) is not there yet"),
    pytest.mark.skipif(os.name != "posix", reason="POSIX: AF_UNIX agents and signals"),
]

TRAIN = textwrap.dedent("""
    import json, os, sys, time
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    print(json.dumps({
        "pid": os.getpid(),
        "params": sum(p.numel() for p in model.parameters()),
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
    }), flush=True)
    stop = sys.argv[1]
    deadline = time.monotonic() + 120
    while not os.path.exists(stop) and time.monotonic() < deadline:
        loss = model(torch.randn(16, 32)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.002)
    print(json.dumps({"cuda_initialized": torch.cuda.is_initialized()}), flush=True)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
""")


@pytest.fixture
def runtime():
    path = tempfile.mkdtemp(prefix="vse2e-")
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


@pytest.fixture
def env(runtime):
    env = {k: v for k, v in os.environ.items() if k not in ("VRAM_STEWARD_AGENT",)}
    env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    return env


class Child:
    """``main.py run -- python script ...`` with its stdout read line by line."""

    def __init__(self, tmp: Path, env: dict, script: str, *args: str, cwd: Path | None = None,
                 name: str = "child.py") -> None:
        self.stop_file = tmp / f"stop-{time.monotonic_ns()}"
        path = (cwd or tmp) / name
        path.write_text(script)
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "main.py"), "run", "--", sys.executable, str(path),
             str(self.stop_file), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
            cwd=str(cwd or tmp))
        self._buf = b""

    def line(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no output; stderr: {self.stderr_now()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"child ended; stderr: {self.stderr_now()}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def stderr_now(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        self.stop_file.write_text("stop")
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def children():
    made: list[Child] = []
    yield made
    for child in made:
        try:
            child.stop_file.write_text("stop")
            child.proc.wait(timeout=10)
        except Exception:
            child.kill()


def agents_json(env: dict) -> list[dict]:
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), "agents", "--json",
                           "--timeout", "5"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for_agent(env: dict, pid: int, with_models: bool = True, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for record in agents_json(env):
            if record["pid"] == pid:
                last = record
                if record["error"] is None and (record["models"] or not with_models):
                    return record
        time.sleep(0.3)
    raise AssertionError(f"agent of {pid} not found; last record: {last}")


def entry_for(runtime: str, pid: int):
    for entry in agent_registry.read_registry(runtime):
        if entry.pid == pid:
            return entry
    raise AssertionError(f"no registry entry for {pid}")


def test_training_child_is_discovered_with_exact_model_sizes(tmp_path, env, runtime, children):
    child = Child(tmp_path, env, TRAIN)
    children.append(child)
    own = child.line()
    record = wait_for_agent(env, own["pid"])
    assert record["torch_status"] == "loaded" and record["torch"]
    assert record["cuda_initialized"] is False  # CPU torch: never initialised by the agent
    matching = [m for m in record["models"] if m["params"] == own["params"]]
    assert len(matching) == 1, record["models"]
    model = matching[0]
    assert model["param_bytes"] == own["param_bytes"]
    assert model["buffer_bytes"] == own["buffer_bytes"]
    assert model["class"].rsplit(".", 1)[-1] == "Sequential" and model["training"] is True
    assert child.stop() == 0
    assert child.line()["cuda_initialized"] is False


def test_free_cache_and_gc_answer_while_training(tmp_path, env, runtime, children):
    child = Child(tmp_path, env, TRAIN)
    children.append(child)
    pid = child.line()["pid"]
    wait_for_agent(env, pid, with_models=False)
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), "free-cache", "--pid",
                           str(pid), "--json"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode in (0, 1), done.stderr
    (result,) = json.loads(done.stdout)
    assert result["pid"] == pid
    # CPU torch: nothing to free, but the agent answers (ok, or a reasoned refusal)
    assert result["ok"] or "timed out" not in (result["error"] or "")
    if result["ok"]:
        assert result["freed"] in (0, None)
    started = time.monotonic()
    gc = agent_client.collect_garbage(entry_for(runtime, pid), timeout_s=10)
    assert gc["ok"], gc
    assert isinstance(gc["collected"], int) and time.monotonic() - started < 10
    report = agent_client.query_report(entry_for(runtime, pid), timeout_s=5)
    assert report.pid == pid
    assert child.stop() == 0


def test_a_project_with_its_own_app_package_works(tmp_path, env, runtime, children):
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("NAME = 'the user app'\n")
    script = TRAIN.replace("import torch\n", "import torch\nimport app\n"
                           "print(json.dumps({'app': app.NAME, 'file': app.__file__}), flush=True)\n", 1)
    child = Child(tmp_path, env, script, cwd=project, name="train.py")
    children.append(child)
    mine = child.line()
    assert mine["app"] == "the user app", mine
    assert mine["file"].startswith(str(project))
    own = child.line()
    record = wait_for_agent(env, own["pid"])
    assert any(m["params"] == own["params"] for m in record["models"])
    assert child.stop() == 0


def test_exit_code_passes_through_and_normal_exit_removes_the_entry(tmp_path, env, runtime,
                                                                   children):
    child = Child(tmp_path, env, TRAIN, "5")
    children.append(child)
    pid = child.line()["pid"]
    wait_for_agent(env, pid, with_models=False)
    path = Path(entry_for(runtime, pid).path)
    assert path.exists()
    assert child.stop() == 5
    assert not path.exists()
    assert pid not in {e.pid for e in agent_registry.read_registry(runtime, prune=False)}


def test_sigterm_passes_through(tmp_path, env, runtime, children):
    child = Child(tmp_path, env, TRAIN)
    children.append(child)
    pid = child.line()["pid"]
    wait_for_agent(env, pid, with_models=False)
    child.proc.send_signal(signal.SIGTERM)
    assert child.proc.wait(timeout=30) == 128 + signal.SIGTERM
    # the child itself is gone
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert pid not in {e.pid for e in agent_registry.read_registry(runtime)}


def test_sigkill_leaves_an_entry_that_the_reader_prunes(tmp_path, env, runtime, children):
    child = Child(tmp_path, env, TRAIN)
    children.append(child)
    pid = child.line()["pid"]
    wait_for_agent(env, pid, with_models=False)
    path = Path(entry_for(runtime, pid).path)
    os.kill(pid, signal.SIGKILL)
    assert child.proc.wait(timeout=30) == 128 + signal.SIGKILL  # run reaped it
    assert path.exists()  # no chance to clean up
    assert pid not in {e.pid for e in agent_registry.read_registry(runtime)}
    assert not path.exists()


LAUNCHER = textwrap.dedent("""
    import json, os, subprocess, sys
    stop = sys.argv[1]
    rank = sys.argv[2]
    procs = [subprocess.Popen([sys.executable, rank, stop], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "RANK": str(r)}) for r in range(2)]
    pids = [json.loads(p.stdout.readline())["pid"] for p in procs]
    print(json.dumps({"launcher": os.getpid(), "ranks": pids}), flush=True)
    sys.exit(max(p.wait() for p in procs))
""")


def test_torchrun_like_launcher_gives_each_rank_an_agent(tmp_path, env, runtime, children):
    rank = tmp_path / "rank.py"
    rank.write_text(TRAIN)
    child = Child(tmp_path, env, LAUNCHER, str(rank), name="launcher.py")
    children.append(child)
    info = child.line(timeout=90)
    for pid in info["ranks"]:
        record = wait_for_agent(env, pid)
        assert record["models"] and record["torch_status"] == "loaded"
    launcher = wait_for_agent(env, info["launcher"], with_models=False)
    assert launcher["torch_status"] == "torch not loaded"  # the launcher never imported torch
    assert child.stop(timeout=60) == 0
