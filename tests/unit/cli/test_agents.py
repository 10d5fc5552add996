"""The agent commands of the CLI: run, agent-path, agents, free-cache."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from app import cli
from tests.fakes.fake_agent import FakeAgent
from tests.unit.cli.running import run_cli

ROOT = Path(__file__).resolve().parents[3]
AGENT_KEYS = {"pid", "argv", "python", "torch", "torch_status", "cuda_initialized",
              "allocator_backend", "devices", "models", "idle_unload_s", "events", "error",
              "managed_by"}
DEVICE_KEYS = {"index", "allocated", "reserved", "peak_allocated", "peak_reserved",
               "inactive_split", "num_alloc_retries", "num_ooms"}
MODEL_KEYS = {"id", "name", "class", "params", "param_bytes", "buffer_bytes", "placeholder_bytes",
              "device", "dtype", "training", "requires_grad", "training_evidence", "last_used",
              "first_seen", "idle_since", "idle_s", "group", "state", "offloaded_to", "pinned",
              "home_device", "unload_blocker", "auto_unload_blocker", "reloaded_at"}
FREE_KEYS = {"pid", "ok", "reserved_before", "reserved_after", "freed", "error"}

needs_unix = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


# Children started here (which load the agent once it exists) register in a
# private runtime dir, never the user's.
pytestmark = pytest.mark.usefixtures("runtime")


@pytest.fixture
def agents(runtime):
    """A good agent and a hung one, each in a real (sleeping) process."""
    fakes = []
    for hang in (False, True):
        fake = FakeAgent(sock_dir=runtime, own_process=True)
        fake.hang = hang
        fake.register(runtime)
        fakes.append(fake)
    yield fakes
    for fake in fakes:
        fake.close()


# ------------------------------------------------------------ agents


@needs_unix
def test_agents_json_contract_and_an_unanswering_agent_is_listed_with_error(capsys, agents):
    good, hung = agents
    started = time.monotonic()
    rc, out, err = run_cli(capsys, "agents", "--json", "--timeout", "0.5")
    assert time.monotonic() - started < 1.5  # agents are asked concurrently
    assert rc == 0, err
    data = {r["pid"]: r for r in json.loads(out)}
    assert set(data) == {good.pid, hung.pid}
    for record in data.values():
        assert set(record) == AGENT_KEYS
    ok = data[good.pid]
    assert ok["error"] is None and ok["torch_status"] == "loaded"
    assert set(ok["devices"][0]) == DEVICE_KEYS and ok["devices"][0]["reserved"] == 4000
    assert set(ok["models"][0]) == MODEL_KEYS and ok["models"][0]["param_bytes"] == 40
    # an older agent: no idle_since, first_seen, evidence or placeholders: unknown, never 0
    old = ok["models"][0]
    assert [old[k] for k in ("idle_since", "idle_s", "first_seen", "placeholder_bytes",
                             "training_evidence", "unload_blocker")] == [None] * 6
    bad = data[hung.pid]
    assert "timed out" in bad["error"] and bad["devices"] == [] and bad["argv"]


@needs_unix
def test_agents_table(capsys, agents):
    rc, out, _ = run_cli(capsys, "agents", "--timeout", "0.3")
    assert rc == 0
    assert "ALLOCATED" in out and "error:" in out and "model (Net)" in out


def test_agents_without_any(capsys, runtime):
    rc, out, _ = run_cli(capsys, "agents", "--json")
    assert rc == 0 and json.loads(out) == []
    rc, out, _ = run_cli(capsys, "agents")
    assert "no agents" in out


def test_agents_demo(capsys):
    rc, out, _ = run_cli(capsys, "agents", "--demo", "--json")
    assert rc == 0
    data = json.loads(out)
    assert len(data) == 4
    assert all(set(r) == AGENT_KEYS and r["error"] is None for r in data)
    models = [m for r in data for m in r["models"]]
    assert all(set(m) == MODEL_KEYS for m in models)
    assert all(m["requires_grad"] is True and m["idle_s"] >= 0 for m in models)
    rc, out, _ = run_cli(capsys, "--demo", "agents")
    assert "StableDiffusionPipeline" in out and "bert-base-uncased" in out


# -------------------------------------------------------- free-cache


@needs_unix
def test_free_cache_by_pid_all_and_exit_codes(capsys, agents):
    good, hung = agents
    rc, out, _ = run_cli(capsys, "free-cache", "--pid", str(good.pid), "--json")
    assert rc == 0
    (result,) = json.loads(out)
    assert set(result) == FREE_KEYS
    assert result == {"pid": good.pid, "ok": True, "reserved_before": 4000,
                      "reserved_after": 1000, "freed": 3000, "error": None}
    rc, out, err = run_cli(capsys, "free-cache", "--all", "--json", "--timeout", "0.5")
    assert rc == 1  # the hung one failed: in the JSON, and said on stderr
    by_pid = {r["pid"]: r for r in json.loads(out)}
    assert by_pid[good.pid]["ok"] and not by_pid[hung.pid]["ok"]
    assert err.startswith(f"{hung.pid}: free-cache failed: ") and err.count("\n") == 1
    rc, out, err = run_cli(capsys, "free-cache", "--all", "--timeout", "0.5")
    assert rc == 1 and out.startswith(f"{good.pid}: freed ") and out.count("\n") == 1
    assert err.startswith(f"{hung.pid}: free-cache failed: ") and err.count("\n") == 1
    rc, out, err = run_cli(capsys, "free-cache", "--pid", "1", "--json")
    assert rc == 2 and json.loads(out) == [] and "no agent" in err
    rc, out, _ = run_cli(capsys, "free-cache", "--pid", str(good.pid))
    assert rc == 0 and "freed" in out


def test_free_cache_needs_a_target(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["free-cache"])
    assert info.value.code == 2


def test_free_cache_demo(capsys):
    rc, out, _ = run_cli(capsys, "free-cache", "--demo", "--all", "--json")
    assert rc == 0
    data = json.loads(out)
    assert len(data) == 4 and all(r["ok"] for r in data)
    assert max(r["freed"] for r in data) > 1024**3
    rc, _, _ = run_cli(capsys, "free-cache", "--demo", "--pid", "1843")  # Xorg: no agent
    assert rc == 2


# --------------------------------------------------------------- run


def main_py(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], capture_output=True,
                          text=True, timeout=60, **kwargs)


def test_agent_path(capsys):
    rc, out, _ = run_cli(capsys, "agent-path")
    assert rc == 0 and out.strip() == str(ROOT / "app" / "agent" / "_bootstrap")


def test_run_sets_the_environment_and_returns_the_exit_code(tmp_path):
    code = ("import os, sys; print(os.environ['PYTHONPATH']); "
            "print(os.environ['VRAM_STEWARD_AGENT']); print(sys.argv[1:]); sys.exit(7)")
    env = {**os.environ, "PYTHONPATH": "/some/where"}
    done = main_py("run", "--", sys.executable, "-c", code, "--demo", "-x", env=env)
    assert done.returncode == 7, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(ROOT / "app" / "agent" / "_bootstrap") + os.pathsep + "/some/where"
    assert lines[1] == "1"
    assert lines[2] == "['--demo', '-x']"
    # without "--" too, and without an existing PYTHONPATH
    env.pop("PYTHONPATH")
    done = main_py("run", sys.executable, "-c", "import os; print(os.environ['PYTHONPATH'])",
                   env=env)
    assert done.returncode == 0 and done.stdout.strip() == str(ROOT / "app" / "agent" / "_bootstrap")


def test_run_unknown_command_is_127():
    done = main_py("run", "--", "no-such-command-vram-steward")
    assert done.returncode == 127
    assert "not found" in done.stderr


def test_run_without_a_command_is_an_error():
    assert main_py("run").returncode == 2


def test_run_imports_no_qt_numpy_or_psutil():
    code = ("import sys; from app import cli; rc = cli.main(['run', '--', sys.executable, '-c', "
            "'pass']); bad = [m for m in ('PySide6', 'numpy', 'psutil', 'pyqtgraph') "
            "if m in sys.modules]; print(bad); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_run_forwards_signals_to_the_command(tmp_path, sig):
    marker = tmp_path / "got"
    code = ("import signal, sys, time, pathlib\n"
            "def h(n, f):\n"
            f"    pathlib.Path({str(marker)!r}).write_text(str(n)); sys.exit(42)\n"
            f"signal.signal({int(sig)}, h)\n"
            f"pathlib.Path({str(marker)!r} + '.ready').write_text('1')\n"
            "time.sleep(30)\n")
    env = {k: v for k, v in os.environ.items() if k != "VRAM_STEWARD_AGENT"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "run", "--",
                             sys.executable, "-c", code], stdin=subprocess.DEVNULL, env=env)
    ready = Path(str(marker) + ".ready")
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists()
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 42
    assert marker.read_text() == str(int(sig))


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_run_reports_death_by_signal_as_128_plus_n():
    done = main_py("run", "--", sys.executable, "-c",
                   "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
                   stdin=subprocess.DEVNULL)
    assert done.returncode == 128 + signal.SIGTERM


@needs_unix
def test_a_default_runtime_dir_open_to_others_is_said_once_and_agents_use_a_fallback(
        monkeypatch):
    """Without a second user: our own default dir, open to everyone (anything may
    have been planted there), is refused like anyone else's."""
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="vstc", dir="/tmp"))
    os.chmod(tmp, 0o1777)
    primary = os.path.join(tmp, f"vram-steward-{os.getuid()}")
    os.mkdir(primary)
    os.chmod(primary, 0o777)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VRAM_STEWARD_RUNTIME_DIR", "VRAM_STEWARD_AGENT")}
    env["TMPDIR"] = tmp
    wait = "import os, sys; print(os.getpid(), flush=True); sys.stdin.readline()"
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "run", "--", sys.executable,
                             "-c", wait], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        (fallback,) = [os.path.join(tmp, n) for n in os.listdir(tmp)
                       if n.startswith(f"vram-steward-{os.getuid()}-")]
        line = (f"vram-steward: {primary} is open to group/others (mode 777): using {fallback} "
                "instead")
        listed = subprocess.run([sys.executable, str(ROOT / "main.py"), "agents", "--json"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert [r["pid"] for r in json.loads(listed.stdout)] == [pid]
        assert listed.stderr.splitlines() == [line]
        _out, err = proc.communicate("\n", timeout=30)
        assert proc.returncode == 0 and err.splitlines() == [line]
        assert os.listdir(primary) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["rm", "-rf", tmp], check=False)
