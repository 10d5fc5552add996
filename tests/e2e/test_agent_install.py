"""``agent install`` in a fresh virtualenv: every PyTorch process started
there has the agent, however it is launched, and nothing else changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
#: Where the test's torch lies (this venv): the fresh environment reaches it
#: through a .pth of the test's own, as if torch had been installed there.
TORCH_SITE = sysconfig.get_paths()["purelib"]

TRAIN = textwrap.dedent("""
    import os, sys, time, torch
    model = torch.nn.Linear(64, 64).eval()
    print(json.dumps({"pid": os.getpid(), "agent": "vram_steward_agent" in sys.modules}),
          flush=True) if (json := __import__("json")) else None
    stop = sys.argv[1]
    while not os.path.exists(stop):
        time.sleep(0.05)
""")


def files_of(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def world(tmp_path):
    env = tmp_path / "env"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(env)], check=True)
    state, runtime = tmp_path / "state", tmp_path / "run"
    state.mkdir(mode=0o700)
    runtime.mkdir(mode=0o700)
    variables = {**os.environ, "VRAM_STEWARD_STATE_DIR": str(state),
                 "VRAM_STEWARD_RUNTIME_DIR": str(runtime), "PYTHONPATH": ""}
    variables.pop("VRAM_STEWARD_AGENT", None)
    return env, variables, runtime, tmp_path


def app(variables, *args):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True,
                          text=True, env={**variables, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          timeout=120)


def python_of(env: Path) -> str:
    return str(env / "bin" / "python")


def site_of(env: Path) -> Path:
    out = subprocess.run([python_of(env), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def test_a_conda_environment_is_named_as_one(world):
    """conda marks its environments with conda-meta/ (no conda on this machine: the
    marker on a virtualenv stands in for it); the install goes where its Python says."""
    env, variables, _, _ = world
    (env / "conda-meta").mkdir()
    done = app(variables, "agent", "install", "--env", str(env))
    assert done.returncode == 0 and "conda" in done.stdout, done.stderr
    assert app(variables, "agent", "uninstall", "--env", str(env)).returncode == 0


def test_install_then_uninstall_leaves_the_environment_as_it_was(world):
    env, variables, runtime, _ = world
    before = files_of(env)
    done = app(variables, "agent", "install", "--env", str(env))
    assert done.returncode == 0, done.stderr
    assert "installed into" in done.stdout
    status = json.loads(app(variables, "agent", "status", "--json").stdout)
    assert [(s["site"], s["installed"]) for s in status] == [(str(site_of(env)), True)]
    # A process of the environment that never imports torch: nothing but the hook.
    probe = subprocess.run([python_of(env), "-c", "import sys, threading; print(threading."
                            "active_count(), 'vram_steward_agent' in sys.modules, "
                            "'vram_steward_hook' in sys.modules)"],
                           capture_output=True, text=True, env=variables, check=True)
    assert probe.stdout.split() == ["1", "False", "True"] and not probe.stderr
    assert list(runtime.iterdir()) == []  # no socket, no registry entry, no file
    done = app(variables, "agent", "uninstall", "--env", str(env))
    assert done.returncode == 0, done.stderr
    assert files_of(env) == before  # the hook's bytecode included
    assert json.loads(app(variables, "agent", "status", "--json").stdout) == []


def start(env, variables, tmp_path, *command, extra=None):
    stop = tmp_path / f"stop-{time.monotonic_ns()}"
    proc = subprocess.Popen([*command, str(stop)], stdout=subprocess.PIPE, text=True,
                            env={**variables, **(extra or {})}, cwd=tmp_path)
    return proc, stop


def wait_agent(variables, pid: int, present: bool = True) -> list:
    deadline = time.monotonic() + 30
    while True:
        agents = json.loads(app(variables, "agents", "--json").stdout)
        if (pid in {a["pid"] for a in agents}) == present or time.monotonic() > deadline:
            return agents
        time.sleep(0.3)


@pytest.fixture
def installed(world):
    env, variables, runtime, tmp_path = world
    assert app(variables, "agent", "install", "--env", str(env)).returncode == 0
    (site_of(env) / "zz_test_torch.pth").write_text(TORCH_SITE + "\n")
    (tmp_path / "train.py").write_text(TRAIN)
    yield world
    app(variables, "agent", "uninstall", "--env", str(env))


@pytest.mark.parametrize("how", ["script", "module", "launcher"])
def test_a_torch_process_has_the_agent_however_it_is_started(installed, how):
    env, variables, _, tmp_path = installed
    if how == "script":
        command = [python_of(env), "train.py"]
    elif how == "module":
        command = [python_of(env), "-m", "train"]
    else:  # a launcher script, as ComfyUI's and AUTOMATIC1111's start their Python
        launcher = tmp_path / "launch.sh"
        launcher.write_text(f'#!/bin/sh\ncd "{tmp_path}"\nexec "{python_of(env)}" train.py "$@"\n')
        launcher.chmod(0o755)
        command = [str(launcher)]
    proc, stop = start(env, variables, tmp_path, *command)
    try:
        own = json.loads(proc.stdout.readline())
        assert own["agent"] is True
        agents = wait_agent(variables, own["pid"])
        assert own["pid"] in {a["pid"] for a in agents}
        models = json.loads(app(variables, "models", "--json").stdout)
        model = next(m for m in models if m["pid"] == own["pid"])
        done = app(variables, "unload", "--pid", str(own["pid"]), "--model", model["id"],
                   "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stdout
    finally:
        stop.write_text("stop")
        assert proc.wait(30) == 0


def test_vram_steward_agent_0_turns_it_off_for_one_process(installed):
    env, variables, runtime, tmp_path = installed
    proc, stop = start(env, variables, tmp_path, python_of(env), "train.py",
                       extra={"VRAM_STEWARD_AGENT": "0"})
    try:
        assert json.loads(proc.stdout.readline())["agent"] is False
    finally:
        stop.write_text("stop")
        proc.wait(30)
    assert not list((runtime).glob("**/*.json"))


def test_spawned_workers_behave_as_under_run(installed):
    """The parent has the agent; ``multiprocessing`` children do not start one."""
    env, variables, _, tmp_path = installed
    (tmp_path / "pool.py").write_text(textwrap.dedent("""
        import json, multiprocessing as mp, os, sys, torch

        def child(_):
            return "vram_steward_agent" in sys.modules and \\
                sys.modules["vram_steward_agent"].is_running()

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                kids = pool.map(child, range(2))
            agent = sys.modules["vram_steward_agent"].is_running()
            print(json.dumps({"parent": agent, "children": kids}))
    """))
    done = subprocess.run([python_of(env), "pool.py"], capture_output=True, text=True,
                          env=variables, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"parent": True, "children": [False, False]}


def test_a_jupyter_kernel_has_the_agent_without_load_ext(installed):
    """A real kernel, started by jupyter_client with the environment's Python as a
    notebook server starts one."""
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    env, variables, _, tmp_path = installed
    manager = jupyter_client.KernelManager()
    manager.kernel_spec.argv = [python_of(env), "-m", "ipykernel_launcher", "-f",
                                "{connection_file}"]
    manager.start_kernel(env=variables, cwd=str(tmp_path))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        outputs = []
        client.execute_interactive(
            "import os, sys, torch\nmodel = torch.nn.Linear(32, 32).eval()\n"
            "print(os.getpid(), 'vram_steward_agent' in sys.modules)",
            timeout=60, output_hook=lambda msg: outputs.append(msg["content"].get("text", "")))
        pid_text, loaded = "".join(outputs).split()
        assert loaded == "True"
        agents = wait_agent(variables, int(pid_text))
        assert int(pid_text) in {a["pid"] for a in agents}
        models = [m for m in json.loads(app(variables, "models", "--json").stdout)
                  if m["pid"] == int(pid_text)]
        done = app(variables, "unload", "--pid", pid_text, "--model", models[0]["id"], "--json")
        assert json.loads(done.stdout)["ok"], done.stdout
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_torchrun_workers_have_the_agent(installed):
    env, variables, _, tmp_path = installed
    (tmp_path / "worker.py").write_text(textwrap.dedent("""
        import json, os, sys, time, torch
        model = torch.nn.Linear(16, 16).eval()
        rank = os.environ["RANK"]
        with open(f"worker-{rank}.json", "w") as f:
            json.dump({"pid": os.getpid(), "agent": "vram_steward_agent" in sys.modules}, f)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.05)
    """))
    stop = tmp_path / "stop-workers"
    proc = subprocess.Popen([python_of(env), "-m", "torch.distributed.run", "--standalone",
                             "--nproc_per_node", "1", "worker.py", str(stop)],
                            env=variables, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        report = tmp_path / "worker-0.json"
        deadline = time.monotonic() + 60
        while not report.exists() or not report.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "no worker started"
            time.sleep(0.1)
        time.sleep(0.2)
        worker = json.loads(report.read_text())
        assert worker["agent"] is True
        assert worker["pid"] in {a["pid"] for a in wait_agent(variables, worker["pid"])}
        models = [m for m in json.loads(app(variables, "models", "--json").stdout)
                  if m["pid"] == worker["pid"]]
        done = app(variables, "unload", "--pid", str(worker["pid"]), "--model", models[0]["id"],
                   "--json")
        assert json.loads(done.stdout)["ok"], done.stdout
    finally:
        stop.write_text("stop")
        proc.wait(60)


def test_a_broken_install_never_breaks_import_torch(installed):
    """The agent's copy damaged (a file gone): torch imports as before, nothing is
    printed, the process ends normally."""
    env, variables, _, tmp_path = installed
    files = site_of(env) / "vram_steward_agent_files"
    (files / "runtime.py").unlink()
    done = subprocess.run([python_of(env), "-c", "import torch; print(torch.ones(2).sum().item())"],
                          capture_output=True, text=True, env=variables, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "2.0" and done.stderr == ""


def test_user_site_install_reaches_every_process_of_that_python(world):
    _, variables, _, tmp_path = world
    base = tmp_path / "userbase"
    variables = {**variables, "PYTHONUSERBASE": str(base)}
    site = subprocess.run([BASE_PYTHON, "-c", "import site; print(site.getusersitepackages())"],
                          capture_output=True, text=True, env=variables, check=True).stdout.strip()
    os.makedirs(site)
    before = files_of(base)
    done = app(variables, "agent", "install", "--user", "--python", BASE_PYTHON)
    assert done.returncode == 0 and site in done.stdout, done.stderr
    probe = subprocess.run([BASE_PYTHON, "-c", "import sys; print('vram_steward_hook' in "
                            "sys.modules)"], capture_output=True, text=True, env=variables)
    assert probe.stdout.strip() == "True"
    assert app(variables, "agent", "uninstall", "--user", "--python",
               BASE_PYTHON).returncode == 0
    assert files_of(base) == before
